"""GSM8K through lm-evaluation-harness, against an OpenAI-compatible server.

The workload is lm-eval itself (`lm-eval[api]>=0.4.10`, the `proctor[eval]` extra), run as a
child process with `local-completions` (or `local-chat-completions` with the chat template and
multi-turn few-shot) and `tokenizer_backend=none`, so it needs neither torch nor a tokenizer.
`--data DIR` writes a self-contained copy of the task over local JSONL for offline use.
Results come from lm-eval's results JSON, never its printed table.

    python -m proctor.workloads.gsm8k --base-url http://127.0.0.1:8000 --model M \
        --fewshot 3 --limit 5 --data ../shared/data/gsm8k --output-dir DIR

writes DIR/metrics.json ({"schema", "kind": "gsm8k", "status", "metrics", ...}) and DIR/lm_eval/
(lm-eval's own output), and exits 0, 3 (lm-eval failed, left no results, or requests went
unanswered beyond --max-error-rate), 64 or 69. Its flags are EvalJob's (jobs/eval.py), as are
`proctor eval gsm8k`'s, whose supervised run is `python -m proctor.jobs run JOB` (the same
`run_gsm8k`).

lm-eval exits 0 and scores an empty answer when a request fails for good in its sync path, or
when the server answers 200 with null content; the accuracy is then bogus. Its log says so
(`API returned null content`, `API request failed after multiple retries`): those lines are
counted as unanswered requests, and more than --max-error-rate of the samples (default 0) fail
the run, with the count in metrics.json (`unanswered`, `error_rate`) and the first lines quoted.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proctor import redact
from proctor.errors import ProctorError, TargetUnavailable, UsageError, WorkloadFailed
from proctor.jobs.documents import EVAL_SCHEMA, EvalDocument, write_checked
from proctor.jobs.eval import EvalJob
from proctor.jobs.options import add_arguments, validated, values_given
from proctor.source.manifest import digest_of

SCHEMA = EVAL_SCHEMA
TASK = "gsm8k"
FILTERS = ("flexible-extract", "strict-match")
OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


#: What to run: the typed eval job (jobs/eval.py), declared there once; `base_url` may be the
#: server root, `.../v1` or the full endpoint.
Gsm8kConfig = EvalJob


def endpoint_url(base_url: str, chat: bool) -> str:
    """The completions endpoint lm-eval posts to, from a root, `/v1` or full endpoint URL."""
    url = base_url.rstrip("/")
    for suffix in ("/v1/chat/completions", "/v1/completions"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
            break
    url = url.removesuffix("/v1")
    return f"{url}/v1/chat/completions" if chat else f"{url}/v1/completions"


def build_lm_eval_command(
    config: EvalJob,
    output_path: Path,
    *,
    include_path: Path | None = None,
    lm_eval: Sequence[str] = ("lm_eval",),
) -> list[str]:
    """The lm-eval argv for this job, writing under `output_path` (legacy form, which every
    version >= 0.4.10 takes); `include_path` holds a task file that replaces the built-in one,
    `lm_eval` is how lm-eval is started (`find_lm_eval`)."""
    model_args = ",".join(
        [
            f"model={config.model}",
            f"base_url={endpoint_url(config.base_url, config.chat)}",
            f"num_concurrent={config.num_concurrent}",
            f"max_retries={config.max_retries}",
            "tokenized_requests=False",
            "tokenizer_backend=none",
        ]
    )
    argv = [
        *lm_eval,
        "--model",
        "local-chat-completions" if config.chat else "local-completions",
        "--model_args",
        model_args,
        "--tasks",
        TASK,
        "--num_fewshot",
        str(config.num_fewshot),
        "--output_path",
        str(output_path),
    ]
    if config.chat:
        argv += ["--apply_chat_template", "--fewshot_as_multiturn"]
    if config.limit is not None:
        argv += ["--limit", str(config.limit)]
    if config.gen_kwargs:
        argv += ["--gen_kwargs", config.gen_kwargs]
    if include_path is not None:
        argv += ["--include_path", str(include_path)]
    if config.log_samples:
        argv.append("--log_samples")
    return argv


# The built-in task, version 3.0, with the hub dataset replaced by local JSONL files.
# Scalars go through json.dumps: a JSON string is a valid YAML double-quoted scalar.
_TASK_TEMPLATE = """\
# Written by proctor: lm-eval's gsm8k task (v3.0) over local files, for offline use.
task: gsm8k
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    train: {train}
    test: {test}
output_type: generate_until
training_split: train
fewshot_split: train
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
generation_kwargs:
  until: ["Question:", "</s>", "<|im_end|>"]
  do_sample: false
  temperature: 0.0
repeats: 1
num_fewshot: 5
filter_list:
  - name: "strict-match"
    filter:
      - function: "regex"
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: "take_first"
  - name: "flexible-extract"
    filter:
      - function: "regex"
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"
      - function: "take_first"
metadata:
  version: 3.0
"""


def write_offline_task(data_dir: Path, out_dir: Path) -> Path:
    """Write `out_dir/gsm8k.yaml` over `data_dir/{train,test}.jsonl`; return the include path.

    Passed with `--include_path`, it overrides the built-in task of the same name (lm-eval logs
    a warning), so results stay under `results.gsm8k`.
    """
    data_dir = Path(data_dir).resolve()
    files = {split: data_dir / f"{split}.jsonl" for split in ("train", "test")}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise UsageError(
            f"GSM8K data not found: {', '.join(missing)}",
            hint="point --data at a folder holding train.jsonl and test.jsonl",
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = _TASK_TEMPLATE.format(
        train=json.dumps(str(files["train"])), test=json.dumps(str(files["test"]))
    )
    (out_dir / "gsm8k.yaml").write_text(text, encoding="utf-8")
    return out_dir


def data_files(data_dir: Path) -> dict[str, Any]:
    """Which bytes `--data DIR` held: each split's sha256 and one digest of them (the digest a
    `--target` names its shipped copy by, targets/remote/shipfiles.py)."""
    data_dir = Path(data_dir).resolve()
    files = {
        name: hashlib.sha256((data_dir / name).read_bytes()).hexdigest()
        for name in ("train.jsonl", "test.jsonl")
    }
    return {"path": str(data_dir), "sha256": digest_of(files), "files": files}


@dataclass(frozen=True)
class FilterScore:
    exact_match: float
    stderr: float | None  # None where lm-eval wrote "N/A" (e.g. one sample)


@dataclass(frozen=True)
class Gsm8kResult:
    flexible_extract: FilterScore
    strict_match: FilterScore
    n_samples: int  # documents evaluated (n-samples.gsm8k.effective)
    n_original: int | None
    num_fewshot: int | None
    task_version: str | None
    lm_eval_version: str | None
    model: str | None
    evaluation_time_s: float | None
    results_file: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_metrics(self) -> dict[str, Any]:
        """Flat metric names, as the store and baselines see them."""
        return {
            "exact_match_flexible_extract": self.flexible_extract.exact_match,
            "exact_match_flexible_extract_stderr": self.flexible_extract.stderr,
            "exact_match_strict_match": self.strict_match.exact_match,
            "exact_match_strict_match_stderr": self.strict_match.stderr,
            "n_samples": self.n_samples,
        }


def find_results_file(output_path: Path) -> Path | None:
    """The newest `results_*.json` lm-eval wrote under `output_path` (or the file itself)."""
    output_path = Path(output_path)
    if output_path.is_file():
        return output_path
    found = sorted(output_path.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _number(value: Any, what: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise WorkloadFailed(f"lm-eval results {path} have no number for {what} (got {value!r})")
    return float(value)


def _stderr(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
        return float(value)
    return None


def read_results(output_path: Path) -> Gsm8kResult:
    """Parse lm-eval's results JSON (a file, or the newest one under a folder)."""
    path = find_results_file(Path(output_path))
    if path is None:
        raise WorkloadFailed(
            f"lm-eval wrote no results JSON under {output_path}",
            hint="see its log; a failed request or a wrong --base-url/--model is the usual cause",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        task = data["results"][TASK]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise WorkloadFailed(f"lm-eval results {path} unreadable: {error!r}") from error
    scores = {
        name: FilterScore(
            exact_match=_number(task.get(f"exact_match,{name}"), f"exact_match,{name}", path),
            stderr=_stderr(task.get(f"exact_match_stderr,{name}")),
        )
        for name in FILTERS
    }
    n_samples = data.get("n-samples", {}).get(TASK, {})
    effective = n_samples.get("effective", task.get("sample_len"))
    if not isinstance(effective, int):
        raise WorkloadFailed(f"lm-eval results {path} do not say how many samples were evaluated")
    n_shot = data.get("n-shot", {}).get(TASK)
    version = data.get("versions", {}).get(TASK)
    elapsed = data.get("total_evaluation_time_seconds")
    return Gsm8kResult(
        flexible_extract=scores["flexible-extract"],
        strict_match=scores["strict-match"],
        n_samples=effective,
        n_original=n_samples.get("original"),
        num_fewshot=n_shot if isinstance(n_shot, int) else None,
        task_version=None if version is None else str(version),
        lm_eval_version=data.get("lm_eval_version"),
        model=data.get("model_name"),
        evaluation_time_s=float(elapsed) if isinstance(elapsed, (int, float, str)) else None,
        results_file=str(path),
    )


# lm-eval's own words for a request that got no real answer (0.4.10 .. 0.4.13).
UNANSWERED = re.compile(rb"API returned null content|API request failed after multiple retries")
QUOTED_LINES = 3


def unanswered_requests(log_path: Path) -> tuple[int, list[str]]:
    """How many requests lm-eval's log says went unanswered, and the first such lines."""
    count, first = 0, list[str]()
    try:
        with open(log_path, "rb") as log:
            for line in log:  # line by line: a long log never sits in memory
                if UNANSWERED.search(line):
                    count += 1
                    if len(first) < QUOTED_LINES:
                        first.append(line.decode(errors="replace").strip()[:200])
    except OSError:
        return 0, []
    return count, first


def check_answered(log_path: Path, n_samples: int, max_error_rate: float) -> dict[str, Any]:
    """The unanswered-request verdict for metrics.json; raises WorkloadFailed beyond the limit."""
    count, first = unanswered_requests(log_path)
    rate = count / n_samples if n_samples else (1.0 if count else 0.0)
    verdict = {
        "unanswered": count,
        "error_rate": rate,
        "max_error_rate": max_error_rate,
        "first_lines": first,
        "ok": rate <= max_error_rate,
    }
    if not verdict["ok"]:
        verdict["message"] = (
            f"{count} of {n_samples} requests got no answer "
            f"({rate:.1%}; allowed {max_error_rate:.1%}); first: " + " | ".join(first)
        )
    return verdict


def find_lm_eval(explicit: str | None = None) -> tuple[str, ...]:
    """How to start lm-eval: an explicit path, `lm_eval` on PATH, or this Python's module."""
    if explicit:
        if shutil.which(explicit) is None:
            raise TargetUnavailable(
                f"lm-eval not found at {explicit}", hint="give the path of the lm_eval executable"
            )
        return (explicit,)
    on_path = shutil.which("lm_eval")
    if on_path:
        return (on_path,)
    beside = Path(sys.executable).parent / "lm_eval"
    if beside.is_file() and os.access(beside, os.X_OK):
        return (str(beside),)
    if importlib.util.find_spec("lm_eval") is not None:
        return (sys.executable, "-m", "lm_eval")
    raise TargetUnavailable(
        "lm-eval is not installed",
        hint="pip install 'lm-eval[api]>=0.4.10' into proctor's environment (the eval extra)",
    )


def _atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")

    def write(text: str) -> None:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)

    write_checked(redact.data(data), EvalDocument, write)


def run_gsm8k(config: EvalJob, output_dir: Path, *, echo: bool = True) -> Gsm8kResult:
    """Run lm-eval, then write `output_dir/metrics.json` whether it succeeded or not.

    lm-eval writes under `output_dir/lm_eval`; with `config.data`, the task over those files is
    written to `output_dir/task` and lm-eval runs offline. Raises WorkloadFailed when lm-eval
    exits non-zero or leaves no readable results, TargetUnavailable when it cannot be started.
    """
    config.require_model()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(config.data) if config.data else None
    include = write_offline_task(data_dir, output_dir / "task") if data_dir else None
    lm_out = output_dir / "lm_eval"
    try:
        lm_eval: tuple[str, ...] = find_lm_eval(config.lm_eval)
        unstartable: TargetUnavailable | None = None
    except TargetUnavailable as error:  # recorded below: the run says why it did nothing
        lm_eval, unstartable = (config.lm_eval or "lm_eval",), error
    argv = build_lm_eval_command(config, lm_out, include_path=include, lm_eval=lm_eval)
    env = dict(os.environ)
    if include is not None:
        env.update(OFFLINE_ENV)
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "gsm8k",
        "status": "running",
        "command": argv,
        "env_overrides": OFFLINE_ENV if include is not None else {},
        "config": {
            "base_url": endpoint_url(config.base_url, config.chat),
            "model": config.model,
            "num_fewshot": config.num_fewshot,
            "limit": config.limit,
            "chat": config.chat,
            "num_concurrent": config.num_concurrent,
            "gen_kwargs": config.gen_kwargs,
            "data_dir": str(data_dir.resolve()) if data_dir else None,
        },
        "data": data_files(data_dir) if data_dir else None,
        "metrics": {},
    }
    metrics_path = output_dir / "metrics.json"
    if unstartable is not None:
        record.update(status="failed", error=unstartable.one_line())
        _atomic_write_json(metrics_path, record)
        raise unstartable
    metrics_path = output_dir / "metrics.json"
    _atomic_write_json(metrics_path, record)
    started = time.time()
    log_path = output_dir / "lm_eval.log"
    try:
        rc = _run_teed(argv, env, log_path, echo)
    except OSError as error:
        record.update(status="failed", error=f"could not start lm-eval: {error}")
        _atomic_write_json(metrics_path, record)
        raise TargetUnavailable(
            f"could not start lm-eval ({argv[0]}): {error.strerror or error}",
            hint="pip install 'lm-eval[api]>=0.4.10' (the eval extra) or pass --lm-eval PATH",
        ) from error
    record["lm_eval_exit_code"] = rc
    record["wall_time_s"] = round(time.time() - started, 3)
    try:
        if rc != 0:
            raise WorkloadFailed(
                f"lm-eval exited with status {rc}", hint=f"see its log in {log_path}"
            )
        result = read_results(lm_out)
        verdict = check_answered(log_path, result.n_samples, config.max_error_rate)
        record["verdict"] = verdict
        if not verdict["ok"]:
            # The scores stay in the record for the evidence, but the run is not a result.
            record["metrics"] = {
                **result.to_metrics(),
                "unanswered": verdict["unanswered"],
                "error_rate": verdict["error_rate"],
                "workload_failed": 1,
            }
            raise WorkloadFailed(
                f"eval failed: {verdict['message']}",
                hint=f"see {log_path}; --max-error-rate R allows some",
            )
    except ProctorError as error:
        record.update(status="failed", error=error.one_line())
        _atomic_write_json(metrics_path, record)
        raise
    record.update(
        status="ok",
        metrics={
            **result.to_metrics(),
            "unanswered": verdict["unanswered"],
            "error_rate": verdict["error_rate"],
            "workload_failed": 0,
        },
        results_file=os.path.relpath(result.results_file, output_dir),
        lm_eval_version=result.lm_eval_version,
        task_version=result.task_version,
        n_original=result.n_original,
    )
    _atomic_write_json(metrics_path, record)
    return result


def _run_teed(argv: Sequence[str], env: dict[str, str], log_path: Path, echo: bool) -> int:
    """Run argv (same process group: the supervisor stops us together) teeing output to a log."""
    with (
        open(log_path, "wb") as log,
        subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        ) as proc,
    ):
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            log.write(chunk)
            log.flush()
            if echo:
                with contextlib.suppress(OSError, ValueError):
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
        return proc.wait()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m proctor.workloads.gsm8k",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Under a supervised run the wrapper's environment names the run directory.
    p.add_argument(
        "--output-dir",
        type=Path,
        default=os.environ.get("PROCTOR_RUN_DIR"),
        required="PROCTOR_RUN_DIR" not in os.environ,
        help="where metrics.json and lm-eval's output go (default: $PROCTOR_RUN_DIR)",
    )
    add_arguments(p, EvalJob)  # every eval setting, declared once (jobs/eval.py)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = validated(
            EvalJob, values_given(EvalJob, args), what="invalid option", hint="see --help"
        )
        result = run_gsm8k(config, args.output_dir)
    except ProctorError as error:
        print(f"proctor.workloads.gsm8k: {error.one_line()}", file=sys.stderr)
        return int(error.exit_code)
    print(json.dumps({"kind": "gsm8k", "metrics": result.to_metrics()}))
    return 0


if __name__ == "__main__":
    redact.mask_output()  # what proctor's own workload prints goes through the redaction layer
    from proctor.crash import guarded

    sys.exit(guarded("proctor eval", main))
