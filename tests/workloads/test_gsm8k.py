"""GSM8K through lm-eval: command building, the offline task, results parsing, the entry point.

The fast tests run the real lm-eval against a small OpenAI-compatible server on loopback that
answers from the GSM8K answer key on a fixed pattern, so the expected scores are known exactly.
The `engine` test runs the whole workload against real vLLM for CPU.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from proctor.cli.eval import app as eval_app
from proctor.errors import TargetUnavailable, UsageError, WorkloadFailed
from proctor.jobs.options import validated
from proctor.workloads.gsm8k import (
    Gsm8kConfig,
    build_lm_eval_command,
    endpoint_url,
    find_lm_eval,
    read_results,
    run_gsm8k,
    write_offline_task,
)
from tests.fixtures.answer_key_server import AnswerKeyServer, answer_key_server
from tests.infra.engines import (
    REPO_ROOT,
    EngineServer,
    gsm8k_data_dir,
    vllm_server,  # noqa: F401  (session fixture)
)

CAPTURED = REPO_ROOT / "tests" / "data" / "captured" / "lm-eval"
LM_EVAL = find_lm_eval() if importlib.util.find_spec("lm_eval") else None
needs_lm_eval = pytest.mark.skipif(LM_EVAL is None, reason="lm-eval not installed (proctor[eval])")


def _config(**overrides: Any) -> Gsm8kConfig:
    base: dict[str, Any] = {"base_url": "http://127.0.0.1:8000", "model": "smollm2"}
    return Gsm8kConfig(**{**base, **overrides})


# ---- command building -----------------------------------------------------------------------


def test_completions_command_has_every_model_arg() -> None:
    argv = build_lm_eval_command(_config(limit=5, num_concurrent=65), Path("/tmp/out"))
    assert argv[:3] == ["lm_eval", "--model", "local-completions"]
    model_args = argv[argv.index("--model_args") + 1].split(",")
    assert model_args == [
        "model=smollm2",
        "base_url=http://127.0.0.1:8000/v1/completions",
        "num_concurrent=65",
        "max_retries=3",
        "tokenized_requests=False",
        "tokenizer_backend=none",
    ]
    assert argv[argv.index("--tasks") + 1] == "gsm8k"
    assert argv[argv.index("--num_fewshot") + 1] == "3"
    assert argv[argv.index("--limit") + 1] == "5"
    assert argv[argv.index("--output_path") + 1] == "/tmp/out"
    for absent in ("--apply_chat_template", "--fewshot_as_multiturn", "--gen_kwargs"):
        assert absent not in argv
    assert "--log_samples" not in argv and "--include_path" not in argv


def test_chat_command_uses_chat_endpoint_and_template() -> None:
    argv = build_lm_eval_command(
        _config(chat=True, gen_kwargs="max_gen_toks=512", log_samples=True),
        Path("/tmp/out"),
        include_path=Path("/t"),
        lm_eval=(sys.executable, "-m", "lm_eval"),
    )
    assert argv[:3] == [sys.executable, "-m", "lm_eval"]
    assert argv[argv.index("--model") + 1] == "local-chat-completions"
    assert (
        "base_url=http://127.0.0.1:8000/v1/chat/completions" in argv[argv.index("--model_args") + 1]
    )
    assert "--apply_chat_template" in argv and "--fewshot_as_multiturn" in argv
    assert argv[argv.index("--gen_kwargs") + 1] == "max_gen_toks=512"
    assert argv[argv.index("--include_path") + 1] == "/t"
    assert "--log_samples" in argv and "--limit" not in argv


@pytest.mark.parametrize(
    ("given", "chat", "expected"),
    [
        ("http://h:1", False, "http://h:1/v1/completions"),
        ("http://h:1/", False, "http://h:1/v1/completions"),
        ("http://h:1/v1", False, "http://h:1/v1/completions"),
        ("http://h:1/v1/completions", True, "http://h:1/v1/chat/completions"),
        ("http://h:1/v1/chat/completions", False, "http://h:1/v1/completions"),
        ("https://x.example/proxy/v1/", True, "https://x.example/proxy/v1/chat/completions"),
    ],
)
def test_endpoint_url(given: str, chat: bool, expected: str) -> None:
    assert endpoint_url(given, chat) == expected


@pytest.mark.parametrize(
    "overrides",
    [
        {"model": "a,b"},
        {"model": ""},
        {"limit": 0},
        {"num_fewshot": -1},
        {"num_concurrent": 0},
        {"base_url": "127.0.0.1:8000"},
        {"max_error_rate": float("nan")},
    ],
)
def test_bad_config_is_a_usage_error(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _config(**overrides)
    values = {"base_url": "http://127.0.0.1:8000", "model": "smollm2", **overrides}
    with pytest.raises(UsageError) as raised:
        validated(Gsm8kConfig, values, what="invalid option", hint=None)
    assert raised.value.exit_code == 64


def test_missing_lm_eval_path_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(TargetUnavailable, match="lm-eval not found"):
        find_lm_eval(str(tmp_path / "no-lm-eval"))


# ---- the offline task -----------------------------------------------------------------------


def _builtin_task() -> dict[str, Any]:
    import lm_eval

    path = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


@needs_lm_eval
def test_offline_task_matches_builtin_task_but_for_the_data(tmp_path: Path) -> None:
    data = gsm8k_data_dir()
    include = write_offline_task(data, tmp_path / "task")
    ours = yaml.safe_load((include / "gsm8k.yaml").read_text())
    builtin = _builtin_task()
    assert ours["dataset_path"] == "json" and ours["dataset_name"] is None
    files = ours["dataset_kwargs"]["data_files"]
    assert files == {
        "train": str(data.resolve() / "train.jsonl"),
        "test": str(data.resolve() / "test.jsonl"),
    }
    for key in set(builtin) - {"tag", "dataset_path", "dataset_name"}:
        assert ours[key] == builtin[key], key


def test_offline_task_needs_both_files(tmp_path: Path) -> None:
    (tmp_path / "test.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match=r"train\.jsonl"):
        write_offline_task(tmp_path, tmp_path / "task")


# ---- reading results ------------------------------------------------------------------------


def test_reads_captured_real_results() -> None:
    path = next(CAPTURED.glob("results_*.json"))
    result = read_results(path)
    raw = json.loads(path.read_text())["results"]["gsm8k"]
    assert result.flexible_extract.exact_match == raw["exact_match,flexible-extract"]
    assert result.flexible_extract.stderr == raw["exact_match_stderr,flexible-extract"]
    assert result.strict_match.exact_match == raw["exact_match,strict-match"]
    assert result.strict_match.stderr == raw["exact_match_stderr,strict-match"]
    assert result.n_samples == 5 and result.n_original == 1319
    assert result.num_fewshot == 3 and result.task_version == "3.0"
    assert result.lm_eval_version == "0.4.13"
    # The printed table captured from the same run says the same numbers.
    table = (CAPTURED / "lm-eval-table.txt").read_text()
    row = re.search(
        r"\|gsm8k\|\s*3\|flexible-extract\|\s*3\|exact_match\|.\s*\|\s*([0-9.]+)\|", table
    )
    assert row and math.isclose(
        float(row.group(1)), result.flexible_extract.exact_match, abs_tol=1e-4
    )


def test_reads_newest_results_under_a_folder_and_na_stderr(tmp_path: Path) -> None:
    src = json.loads(next(CAPTURED.glob("results_*.json")).read_text())
    old = tmp_path / "m" / "results_2020-01-01T00-00-00.json"
    old.parent.mkdir()
    old.write_text(json.dumps(src))
    os.utime(old, (1, 1))
    src["results"]["gsm8k"]["exact_match,strict-match"] = 1.0
    src["results"]["gsm8k"]["exact_match_stderr,strict-match"] = "N/A"
    (tmp_path / "m" / "results_2021-01-01T00-00-00.json").write_text(json.dumps(src))
    result = read_results(tmp_path)
    assert result.strict_match.exact_match == 1.0 and result.strict_match.stderr is None


@pytest.mark.parametrize(
    "content",
    ["not json", json.dumps({"results": {}}), json.dumps({"results": {"gsm8k": {}}})],
)
def test_unusable_results_are_a_workload_failure(tmp_path: Path, content: str) -> None:
    (tmp_path / "results_x.json").write_text(content)
    with pytest.raises(WorkloadFailed):
        read_results(tmp_path)


def test_no_results_is_a_workload_failure(tmp_path: Path) -> None:
    with pytest.raises(WorkloadFailed, match="no results JSON"):
        read_results(tmp_path)


# ---- against a loopback server that answers from the answer key ------------------------------


@pytest.fixture(name="answer_key_server")
def _answer_key_server() -> Iterator[AnswerKeyServer]:
    with answer_key_server(gsm8k_data_dir()) as server:
        yield server


@needs_lm_eval
@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_workload_scores_known_answers(
    answer_key_server: AnswerKeyServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chat: bool,
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    out = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "proctor.workloads.gsm8k",
        "--base-url",
        answer_key_server.base_url,
    ]
    argv += ["--model", "m1", "--fewshot", "3", "--limit", "5", "--num-concurrent", "2"]
    argv += ["--data", str(gsm8k_data_dir()), "--output-dir", str(out)]
    if chat:
        argv.append("--chat")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    record = json.loads((out / "metrics.json").read_text())
    assert record["schema"] == "proctor.gsm8k-metrics/1" and record["kind"] == "gsm8k"
    assert record["status"] == "ok" and record["lm_eval_exit_code"] == 0
    assert record["env_overrides"] == {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    m = record["metrics"]
    # Test docs 0..4: right {0, 3}, flexible-only {1, 4}, wrong {2}.
    assert m["n_samples"] == 5
    assert math.isclose(m["exact_match_flexible_extract"], 0.8)
    assert math.isclose(m["exact_match_strict_match"], 0.4)
    assert math.isclose(m["exact_match_strict_match_stderr"], math.sqrt(0.4 * 0.6 / 4))
    assert (out / record["results_file"]).is_file()
    assert (out / "lm_eval.log").stat().st_size > 0

    paths = {path for path, _ in answer_key_server.requests}
    assert paths == {"/v1/chat/completions" if chat else "/v1/completions"}
    assert len(answer_key_server.requests) == 5
    _, body = answer_key_server.requests[0]
    assert body["model"] == "m1" and body["temperature"] == 0
    if chat:
        # Multi-turn few-shot: 3 example turns plus the question.
        assert [msg["role"] for msg in body["messages"]].count("user") == 4
    else:
        assert body["prompt"].count("Question:") == 4
        assert "Question:" in body["stop"]


@needs_lm_eval
@pytest.mark.parametrize(("allowed", "code"), [(None, 3), ("0.2", 0)])
def test_unanswered_requests_are_not_an_accuracy(
    answer_key_server: AnswerKeyServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    allowed: str | None,
    code: int,
) -> None:
    # lm-eval scores a null answer as a wrong one and exits 0: the accuracy would be bogus.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    answer_key_server.null_answers.add(0)
    out = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "proctor.workloads.gsm8k",
        "--base-url",
        answer_key_server.base_url,
        "--model",
        "m1",
        "--fewshot",
        "1",
        "--limit",
        "5",
        "--num-concurrent",
        "2",
        "--data",
        str(gsm8k_data_dir()),
        "--output-dir",
        str(out),
    ]
    argv += ["--max-error-rate", allowed] if allowed else []
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((out / "metrics.json").read_text())
    assert record["metrics"]["unanswered"] == 1 and record["verdict"]["unanswered"] == 1
    if code:
        assert "1 of 5 requests got no answer" in proc.stderr
        assert record["status"] == "failed" and record["metrics"]["workload_failed"] == 1
    else:
        assert record["status"] == "ok" and record["metrics"]["workload_failed"] == 0


@needs_lm_eval
def test_cli_json_output(
    answer_key_server: AnswerKeyServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    args = ["gsm8k", "--base-url", answer_key_server.base_url, "--model", "m1", "--limit", "3"]
    args += ["--data", str(gsm8k_data_dir()), "--output-dir", str(tmp_path / "o"), "--json"]
    result = CliRunner().invoke(eval_app, args)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    # Docs 0..2: flexible right for 0 and 1, strict right for 0.
    assert math.isclose(printed["metrics"]["exact_match_flexible_extract"], 2 / 3)
    assert math.isclose(printed["metrics"]["exact_match_strict_match"], 1 / 3)


def test_cli_rejects_missing_data(tmp_path: Path) -> None:
    args = ["gsm8k", "--model", "m", "--data", str(tmp_path / "none"), "--lm-eval", "/bin/true"]
    args += ["--output-dir", str(tmp_path / "o")]
    result = CliRunner().invoke(eval_app, args)
    assert isinstance(result.exception, UsageError)
    assert "GSM8K data not found" in result.exception.message


@pytest.mark.parametrize(
    ("lm_eval", "message"),
    [("/bin/false", "exited with status 1"), ("/bin/true", "no results JSON")],
)
def test_entry_point_exits_3_when_lm_eval_fails(tmp_path: Path, lm_eval: str, message: str) -> None:
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "proctor.workloads.gsm8k", "--base-url", "http://127.0.0.1:9"]
    argv += ["--model", "m", "--output-dir", str(out), "--lm-eval", lm_eval]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert message in proc.stderr
    record = json.loads((out / "metrics.json").read_text())
    assert record["status"] == "failed" and message in record["error"]
    assert record["metrics"] == {}


def test_run_gsm8k_unstartable_lm_eval_is_unavailable(tmp_path: Path) -> None:
    config = _config(lm_eval=str(tmp_path / "missing-binary"))
    with pytest.raises(TargetUnavailable):
        run_gsm8k(config, tmp_path / "o", echo=False)
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["status"] == "failed"


# ---- against real vLLM for CPU -------------------------------------------------------------


@pytest.mark.engine
@pytest.mark.slow
@needs_lm_eval
def test_gsm8k_against_real_vllm(
    vllm_server: EngineServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "proctor.workloads.gsm8k", "--base-url", vllm_server.base_url]
    argv += ["--model", vllm_server.model, "--fewshot", "3", "--limit", "5"]
    argv += ["--num-concurrent", "5", "--data", str(gsm8k_data_dir()), "--output-dir", str(out)]
    posts_before = _completion_posts(vllm_server)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((out / "metrics.json").read_text())
    assert record["status"] == "ok"
    result = read_results(out / record["results_file"])
    assert result.n_samples == 5 and result.num_fewshot == 3
    for score in (result.flexible_extract, result.strict_match):
        assert 0.0 <= score.exact_match <= 1.0
        assert score.stderr is not None and score.stderr >= 0.0
    scores = result.to_metrics()
    assert {k: record["metrics"][k] for k in scores} == scores
    # Every request was answered, so the accuracy is one.
    assert (record["metrics"]["unanswered"], record["metrics"]["workload_failed"]) == (0, 0)
    # The five requests really reached the server (the log is shared with other tests).
    assert _completion_posts(vllm_server) - posts_before == 5


def _completion_posts(server: EngineServer) -> int:
    return server.log_path.read_text(errors="replace").count('"POST /v1/completions HTTP/1.1" 200')
