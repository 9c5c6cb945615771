"""`proctor check` / `results` against inputs that must not produce a verdict they do not
support: numbers that are not numbers, baselines that check nothing or say one thing twice,
and run directories whose run failed or holds no result file. The real CLI in a subprocess."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import only_run, proctor

BLOCK = """============ Serving Benchmark Result ============
Successful requests:                     100
Benchmark duration (s):                  10.5
Output token throughput (tok/s):         {out}
Total token throughput (tok/s):          {total}
Mean TTFT (ms):                          {ttft}
==================================================
"""
BASELINE = """[metrics.output_throughput]
value = 100.0
[metrics.total_token_throughput]
value = 200.0
[metrics.mean_ttft_ms]
value = 50.0
"""


def _log(tmp_path: Path, out: str = "100.0", total: str = "200.0", ttft: str = "50") -> Path:
    log = tmp_path / "bench.log"
    log.write_text(BLOCK.format(out=out, total=total, ttft=ttft))
    return log


def _baseline(tmp_path: Path, text: str = BASELINE, name: str = "base.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_nan_and_inf_in_a_summary_block_are_no_pass(tmp_path: Path) -> None:
    log = _log(tmp_path, out="nan", total="inf", ttft="nan")
    res = proctor("results", "check", str(log), "--baselines", str(_baseline(tmp_path)), "--json")
    assert res.returncode == 6, res.stdout + res.stderr
    doc = json.loads(res.stdout)  # strict JSON: no NaN / Infinity tokens
    assert {v["status"] for v in doc["verdicts"]} == {"missing"}
    assert "not a number" in res.stdout and "output_throughput" in res.stderr
    parsed = proctor("results", "parse", str(log), "--json")
    assert parsed.returncode == 0
    doc = json.loads(parsed.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert "output_throughput" not in doc["metrics"] and doc["metrics"]["completed"]["value"] == 100
    assert doc["meta"]["not_numbers"] == {
        "output_throughput": "nan",
        "total_token_throughput": "inf",
        "mean_ttft_ms": "nan",
    }


@pytest.mark.parametrize(
    ("text", "name", "says"),
    [
        ("[metrics.output_throughput]\nvalue = nan\n", "b.toml", "metrics.output_throughput.value"),
        ("[metrics.output_throughput]\nvalue = inf\n", "b.toml", "metrics.output_throughput.value"),
        ("[metrics.mean_ttft_ms]\nvalue = 50.0\ntolerance = inf\n", "b.toml", "tolerance"),
        ('{"metrics": {"output_throughput": {"value": true}}}', "b.json", "value"),
        ('{"metrics": {"output_throughput": {"value": "100"}}}', "b.json", "value"),
        ('{"metrics": {"output_throughput": NaN}}', "b.json", "value"),
        (
            '{"metrics": {"output_throughput": 100, "output_throughput": 5}}',
            "b.json",
            "output_throughput named twice",
        ),
        ('{"metrics": {}}', "b.json", "names no metric"),
        ("[]", "b.json", "no model entry"),
        ('[{"model_name": "m", "accuracy_threshold": 93}]', "b.json", "accuracy_threshold"),
    ],
)
def test_a_baseline_that_cannot_judge_is_refused(
    tmp_path: Path, text: str, name: str, says: str
) -> None:
    res = proctor(
        "results", "check", str(_log(tmp_path)), "--baselines", str(_baseline(tmp_path, text, name))
    )
    assert res.returncode == 64, res.stdout + res.stderr
    assert says in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def _run_printing_block(tmp_path: Path, status: int) -> tuple[Path, dict[str, str]]:
    runs = tmp_path / "runs"
    env = {"PROCTOR_RUNS_DIR": str(runs)}
    code = f"import sys; sys.stdout.write(open({str(_log(tmp_path))!r}).read()); sys.exit({status})"
    res = proctor("run", "--gpu-sample", "0", "--", sys.executable, "-c", code, env=env)
    assert res.returncode == status, res.stdout + res.stderr
    return only_run(runs), env


def test_check_of_a_command_run_reads_its_log_not_its_record(tmp_path: Path) -> None:
    run_dir, env = _run_printing_block(tmp_path, 0)
    res = proctor("check", run_dir.name, "--baselines", str(_baseline(tmp_path)), env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "output_throughput" in res.stdout and "pass" in res.stdout
    parsed = proctor("results", "parse", str(run_dir), "--json")
    assert parsed.returncode == 0 and json.loads(parsed.stdout)["kind"] == "serving-summary"


def test_check_of_a_failed_run_is_no_verdict(tmp_path: Path) -> None:
    run_dir, env = _run_printing_block(tmp_path, 1)
    res = proctor("check", run_dir.name, "--baselines", str(_baseline(tmp_path)), env=env)
    assert res.returncode == 6, res.stdout + res.stderr
    assert f"run {run_dir.name} ended failed (exit 1)" in res.stderr
    compared = proctor("runs", "compare", run_dir.name, run_dir.name, env=env)
    assert compared.returncode == 0
    assert f"warning: A ({run_dir.name}) ended failed (exit 1)" in compared.stderr


def test_a_run_directory_without_a_result_says_so(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = {"PROCTOR_RUNS_DIR": str(runs)}
    assert (
        proctor("run", "--gpu-sample", "0", "--name", "quiet", "--", "true", env=env).returncode
        == 0
    )
    run_dir = only_run(runs)
    (run_dir / "quiet.log").unlink()  # nothing but proctor's own files left
    res = proctor("check", run_dir.name, "--baselines", str(_baseline(tmp_path)), env=env)
    assert res.returncode == 64, res.stdout + res.stderr
    assert f"no result file in {run_dir}" in res.stderr and "record.json" not in res.stderr


def test_an_integer_past_the_float_range_is_no_crash(tmp_path: Path) -> None:
    serving = tmp_path / "vllm.json"
    serving.write_text('{"output_throughput": ' + "9" * 400 + ', "request_throughput": 1}')
    lm_eval = tmp_path / "lm.json"
    lm_eval.write_text(
        '{"results": {"gsm8k": {"exact_match,flexible-extract": '
        + "9" * 400
        + ', "exact_match_stderr,flexible-extract": "N/A"}}}'
    )
    for path in (serving, lm_eval):
        res = proctor("results", "parse", str(path), "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["metrics"].get("output_throughput") is None
    res = proctor("results", "check", str(serving), "--baselines", str(_baseline(tmp_path)))
    assert res.returncode == 6 and "output_throughput" in res.stderr


def test_a_compare_with_no_metric_on_either_side_is_no_answer(tmp_path: Path) -> None:
    empty = tmp_path / "metrics.json"
    empty.write_text('{"schema": "proctor.bench.metrics", "metrics": {"output_throughput": NaN}}')
    res = proctor("results", "compare", str(empty), str(empty))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "nothing to compare" in res.stderr and "gives output_throughput as nan" in res.stderr


def test_a_baseline_that_never_ends_is_refused(tmp_path: Path) -> None:
    # Read whole before: memory grew until the machine gave out.
    res = proctor("results", "check", str(_log(tmp_path)), "--baselines", "/dev/zero", timeout=60)
    assert res.returncode == 64, res.stdout + res.stderr
    assert "did not end" in res.stderr


def test_a_model_named_with_model_gets_no_other_models_threshold(tmp_path: Path) -> None:
    lm_eval = Path(__file__).parent / "samples" / "lmeval_results.json"
    one = _baseline(
        tmp_path, json.dumps([{"model_name": "DeepSeek-R1", "accuracy_threshold": 0.5}]), "acc.json"
    )
    res = proctor(
        "results", "check", str(lm_eval), "--baselines", str(one), "--model", "Llama-3-70B"
    )
    assert res.returncode == 64, res.stdout + res.stderr
    assert "no baseline entry for model 'Llama-3-70B'" in res.stderr
    # Without --model, the only entry is the one (docs/bench.md), as before.
    assert proctor("results", "check", str(lm_eval), "--baselines", str(one)).returncode == 0


def test_an_acceptance_rate_under_one_percent_is_no_pass(tmp_path: Path) -> None:
    # vLLM prints `Acceptance rate (%)`: 0.80 is 0.8 %, read as 80 % (a pass at 0.7) before.
    log = tmp_path / "spec.log"
    log.write_text(
        BLOCK.format(out="100.0", total="200.0", ttft="50").replace(
            "Mean TTFT", "Acceptance rate (%):                     0.80\nMean TTFT"
        )
    )
    acc = _baseline(
        tmp_path,
        json.dumps([{"model_name": "m", "accuracy_threshold": 0.1, "mtp_accept_threshold": 0.7}]),
        "acc.json",
    )
    res = proctor("results", "check", str(log), "--baselines", str(acc), "--json")
    parsed = proctor("results", "parse", str(log), "--json")
    assert json.loads(parsed.stdout)["metrics"]["spec_acceptance_rate"]["unit"] == "%"
    assert res.returncode == 7, res.stdout + res.stderr  # the accuracy itself: missing here
    verdicts = {v["metric"]: v for v in json.loads(res.stdout)["verdicts"]}
    assert verdicts["mtp_acceptance_rate"]["value"] == pytest.approx(0.008)
