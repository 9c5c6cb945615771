"""`proctor eval gsm8k` refuses bad input with 64 before a run directory exists: before, the
supervised eval made its run and failed inside it, and `--max-error-rate nan` ran lm-eval to the
end only to fail every eval (`rate <= nan` is false)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import GSM8K_DATA, proctor


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--limit", "0"), "--limit must be >= 1"),
        (("--fewshot", "-1"), "--fewshot must be >= 0"),
        (("--max-error-rate", "nan"), "--max-error-rate nan"),
        (("--max-error-rate", "1.5"), "--max-error-rate 1.5"),
        (("--max-error-rate", "-0.1"), "--max-error-rate -0.1"),
    ],
)
def test_bad_input_is_refused_before_any_run(
    tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    runs = tmp_path / "runs"
    # A closed loopback port: nothing is ever asked of it, the input is refused first.
    res = proctor(
        "eval",
        "gsm8k",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--data",
        str(GSM8K_DATA),
        *flags,
        env={"PROCTOR_RUNS_DIR": str(runs)},
    )
    assert res.returncode == 64, res.stdout + res.stderr
    assert says in res.stderr
    assert not runs.exists() or not any(p.is_dir() for p in runs.iterdir())


def test_no_model_and_no_server_is_refused_before_any_run(tmp_path: Path) -> None:
    """The served model name is the user's or the --server run's: with neither, 64 here (the
    job itself may lack it until the --server run, resolved where it runs, gives it)."""
    runs = tmp_path / "runs"
    res = proctor(
        "eval",
        "gsm8k",
        "--base-url",
        "http://127.0.0.1:9",
        "--data",
        str(GSM8K_DATA),
        env={"PROCTOR_RUNS_DIR": str(runs)},
    )
    assert res.returncode == 64, res.stdout + res.stderr
    assert "a served model name is needed: --model, or --server RUN" in res.stderr
    assert not runs.exists() or not any(p.is_dir() for p in runs.iterdir())
