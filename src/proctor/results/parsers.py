"""Read benchmark and evaluation results from anywhere, auto-detecting the format.

Understood: the printed `Serving Benchmark Result` block of vLLM, SGLang and ATOM (labels
matched case-insensitively; the last block in a log wins) and SGLang's `Offline Throughput
Benchmark Result` block, vLLM/ATOM result JSON, SGLang result JSON or JSONL (last line),
proctor's metrics.json (bench, GSM8K, offline, an imported result), lm-eval's results JSON and
the table it prints.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, TypeGuard

from proctor.errors import ConfigError, ProctorError, UsageError
from proctor.jobs.documents import (
    BENCH_SCHEMA,
    BenchDocument,
    RepeatsSection,
    parse_document,
)
from proctor.results.cost import cost_metrics
from proctor.results.model import Metric, ParsedResult
from proctor.results.names import json_key_to_name, label_to_name
from proctor.results.reading import read_bounded
from proctor.stats import finite

BLOCK_START = re.compile(r"=+ *(?:Serving|Offline Throughput) Benchmark Result *=+", re.IGNORECASE)
# lm-eval's printed table: |Tasks|Version|Filter|n-shot|Metric|dir|Value|±|Stderr|
_TABLE_ROW = re.compile(r"^\|" + r"([^|]*)\|" * 9)
# proctor's GSM8K metrics.json keys -> the accuracy names baselines check.
GSM8K_NAMES = {
    "exact_match_flexible_extract": "gsm8k_exact_match_flexible",
    "exact_match_strict_match": "gsm8k_exact_match_strict",
    "n_samples": "gsm8k_n_samples",
}
_LINE = re.compile(r"^\s*([^:]+?):\s+(-?[0-9][0-9.,eE+-]*|inf|nan)\s*$", re.IGNORECASE)
_FILTER_SHORT = {"flexible-extract": "flexible", "strict-match": "strict", "none": ""}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def parse_summary_blocks(text: str) -> list[dict[str, float]]:
    """Every summary block in `text`, as {normalized name: value}. A value printed as nan or
    inf is kept as it reads here; parse_text leaves it out of the metrics."""
    blocks: list[dict[str, float]] = []
    current: dict[str, float] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if BLOCK_START.search(line):
            current = {}
            blocks.append(current)
            continue
        if current is None:
            continue
        if re.fullmatch(r"\s*=+\s*", line) and current:
            current = None  # closing rule
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name = label_to_name(m.group(1))
        if name is not None:
            try:
                current[name] = _num(m.group(2))
            except ValueError:
                continue
    return [b for b in blocks if b]


def _flavour(text: str) -> str:
    if re.search(r"^Backend:\s", text, re.MULTILINE) or "E2E Latency" in text:
        return "sglang"
    return "vllm"


def _cell_number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_lm_eval_table(text: str, path: str | None = None) -> ParsedResult | None:
    """lm-eval's printed results table (rows after a `|Tasks|` header); None if there is none."""
    res = ParsedResult(kind="lm-eval-table", path=path)
    task = ""
    in_table = False
    for raw in text.splitlines():
        m = _TABLE_ROW.match(raw.strip())
        if not m:
            in_table = False
            continue
        cells = [c.strip() for c in m.groups()]
        if cells[0] == "Tasks":
            in_table, task = True, ""
            continue
        if not in_table or all(c and set(c) <= set("-:") for c in cells):
            continue
        task = cells[0].lstrip("- ").strip() or task
        value, stderr = _cell_number(cells[6]), _cell_number(cells[8])
        if not task or value is None:
            continue
        short = _FILTER_SHORT.get(cells[2], cells[2].replace("-", "_"))
        name = "_".join(p for p in (task, cells[4], short) if p)
        res.add(name, value, stderr)
        if cells[3].isdigit():
            res.meta.setdefault("n_shot", {})[task] = int(cells[3])
    return res if res.metrics else None


def parse_text(text: str, path: str | None = None) -> ParsedResult:
    blocks = parse_summary_blocks(text)
    if not blocks:
        table = parse_lm_eval_table(text, path)
        if table is not None:
            return table
        raise ConfigError(
            f"no 'Serving Benchmark Result' block in {path or 'the text'}",
            hint="give a benchmark log, result JSON or lm-eval results JSON",
        )
    res = ParsedResult(
        kind="serving-summary", path=path, meta={"flavour": _flavour(text), "blocks": len(blocks)}
    )
    not_numbers: dict[str, str] = {}
    for name, value in blocks[-1].items():
        if math.isfinite(value) or (name == "request_rate" and value == math.inf):
            res.add(name, value)  # a rate of inf is a setting: requests sent all at once
        else:  # nan / inf is no measurement: never a metric that could pass a baseline
            not_numbers[name] = str(value)
    if not_numbers:
        res.meta["not_numbers"] = not_numbers
    verdict = _printed_verdict(text)
    if verdict is not None:
        res.meta["validity"] = verdict
    return res


def _printed_verdict(text: str) -> dict[str, Any] | None:
    """proctor's own bench prints, under its last summary block, `Result: FAILED: ...` when
    its requests failed and `Validity: INVALID` with `  - reason` lines: a log says what its
    metrics.json says, so checking the log judges the run as checking its id does."""
    tail = text[text.rfind("Serving Benchmark Result") :]
    reasons: list[str] = []
    invalid = False
    lines = tail.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Result: FAILED:"):
            invalid = True
            reasons.append("errors: " + line.removeprefix("Result: FAILED:").strip())
        elif line.startswith("Validity: INVALID"):
            invalid = True
            for more in lines[i + 1 :]:
                if not more.startswith("  - "):
                    break
                said = more[4:]
                if not (
                    said.startswith("errors:") and any(r.startswith("errors:") for r in reasons)
                ):
                    reasons.append(said)
    if not invalid:
        return None
    return {"verdict": "INVALID", "reasons": reasons, "source": "the printed verdict"}


def _finite(v: Any) -> TypeGuard[float]:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int past float's range (JSON integers have no bound)
        return False


def _plain(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _serving_json(obj: dict[str, Any], kind: str, path: str | None) -> ParsedResult:
    res = ParsedResult(kind=kind, path=path)
    not_numbers: dict[str, str] = {}
    for key, value in obj.items():
        name = json_key_to_name(key)
        if name is not None and _finite(value):
            res.add(name, value)
        elif name is not None and value is not None:  # NaN, "fast", true: no measurement
            not_numbers[name] = json.dumps(value)[:40] if _plain(value) else str(value)
    if not_numbers:
        res.meta["not_numbers"] = not_numbers
    for key in ("model_id", "model", "backend", "date", "tokenizer_id"):
        if isinstance(obj.get(key), str):
            res.meta[key] = obj[key]
    return res


def _lm_eval(obj: dict[str, Any], path: str | None) -> ParsedResult:
    res = ParsedResult(kind="lm-eval", path=path)
    results = obj.get("results") or {}
    for task, entries in results.items():
        if not isinstance(entries, dict):
            continue
        for key, value in entries.items():
            if "," not in key or "_stderr," in key or not _finite(value):
                continue
            metric, _, filt = key.partition(",")
            short = _FILTER_SHORT.get(filt, filt.replace("-", "_"))
            name = "_".join(p for p in (task, metric, short) if p)
            stderr = entries.get(f"{metric}_stderr,{filt}")
            res.add(name, value, float(stderr) if _finite(stderr) else None)
    for task, n in (obj.get("n-samples") or {}).items():
        if isinstance(n, dict) and _finite(n.get("effective")):
            res.add(f"{task}_n_samples", n["effective"])
    cfg = obj.get("config") or {}
    if "model" in cfg:
        res.meta["lm_eval_model_type"] = cfg["model"]  # local-completions etc., not a name
    for key in ("model_args", "limit"):
        if key in cfg:
            res.meta[key] = cfg[key]
    if isinstance(obj.get("model_name"), str):
        res.meta["model_name"] = obj["model_name"]
    shots = {t: v for t, v in (obj.get("n-shot") or {}).items()}
    if shots:
        res.meta["n_shot"] = shots
    return res


def _gsm8k_metrics(obj: dict[str, Any], path: str | None) -> ParsedResult:
    res = ParsedResult(kind="gsm8k", path=path, meta={"status": obj.get("status")})
    raw = obj.get("metrics") if isinstance(obj.get("metrics"), dict) else {}
    assert isinstance(raw, dict)
    for key, name in GSM8K_NAMES.items():
        value = raw.get(key)
        if _finite(value):
            stderr = raw.get(f"{key}_stderr")
            res.add(name, value, float(stderr) if _finite(stderr) else None)
    config = obj.get("config") if isinstance(obj.get("config"), dict) else {}
    assert isinstance(config, dict)
    for key in ("model", "num_fewshot", "limit", "chat"):
        if key in config:
            res.meta[key] = config[key]
    for key in ("lm_eval_version", "task_version", "error"):
        if obj.get(key) is not None:
            res.meta[key] = obj[key]
    return res


def _flat_metrics(obj: dict[str, Any], kind: str, path: str | None) -> ParsedResult:
    """proctor's flat metrics.json ({"metrics": {name: value | {value, unit, stderr, n}}})."""
    res = ParsedResult(kind=kind, path=path)
    units = obj.get("units") if isinstance(obj.get("units"), dict) else {}
    assert isinstance(units, dict)
    for name, value in (obj.get("metrics") or {}).items():
        stderr = n = None
        unit = units.get(name)
        if isinstance(value, dict):
            unit, stderr, n = value.get("unit", unit), value.get("stderr"), value.get("n")
            value = value.get("value")
        if _finite(value):
            res.add(str(name), value, float(stderr) if _finite(stderr) else None)
            if isinstance(unit, str) and unit:
                res.metrics[str(name)].unit = unit
            if isinstance(n, int) and not isinstance(n, bool) and n > 1:
                res.metrics[str(name)].n = n  # repeats behind the stderr (an imported export)
    for key in ("status", "engine", "model", "exit_code", "wall_time_s"):
        if obj.get(key) is not None:
            res.meta[key] = obj[key]
    return res


def _repeat_noise(res: ParsedResult, repeats: RepeatsSection | None) -> None:
    """bench --repeat N: each metric's standard error over the repeats, and N."""
    if repeats is None or "stats" not in repeats.model_fields_set:
        return
    for key, s in repeats.stats.items():
        name = json_key_to_name(key)
        metric = res.metrics.get(name) if name else None
        if metric is None:
            continue
        stderr = finite(s.stderr)
        if s.n is not None and s.n > 1 and stderr is not None:
            metric.stderr, metric.n = stderr, s.n
    res.meta["repeats"] = repeats.n


def bench_result(doc: BenchDocument, path: str | None = None) -> ParsedResult:
    """A bench's metrics.json (its typed document) as a parsed result: its figures (those
    that are no number noted, as for any serving JSON), model, version, repeats, validity."""
    res = _serving_json({k: doc.metrics.raw(k) for k in doc.metrics}, "proctor-metrics", path)
    given = doc.model_fields_set
    res.meta.update(
        model=doc.model,
        schema_version=doc.schema_version if "schema_version" in given else None,
        started_at=doc.started_at,
    )
    _repeat_noise(res, doc.repeats)
    if doc.validity is not None:
        res.meta["validity"] = doc.validity.dump()
    return res


def parse_json_obj(obj: Any, path: str | None = None) -> ParsedResult:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path or 'JSON'} is not a JSON object", hint="give a result JSON")
    schema = obj.get("schema")
    if obj.get("kind") == "gsm8k" and str(schema).startswith("proctor."):
        return _gsm8k_metrics(obj, path)
    if obj.get("kind") == "offline" and str(schema).startswith("proctor."):
        return _flat_metrics(obj, "offline", path)
    if schema == "proctor.imported.metrics":  # `proctor results import` (results/exchange/)
        res = _flat_metrics(obj, "imported", path)
        res.meta.update(
            imported_from=obj.get("tool"),
            format=obj.get("format"),
            lacks=obj.get("lacks") if isinstance(obj.get("lacks"), list) else [],
        )
        if isinstance(obj.get("validity"), dict):
            res.meta["validity"] = obj["validity"]
        if isinstance(obj.get("not_numbers"), dict):
            res.meta["not_numbers"] = obj["not_numbers"]
        return res
    if schema == BENCH_SCHEMA:
        doc = parse_document(obj, path or "metrics.json")
        assert isinstance(doc, BenchDocument)
        return bench_result(doc, path)
    results = obj.get("results")
    if isinstance(results, dict) and any(isinstance(v, dict) for v in results.values()):
        return _lm_eval(obj, path)
    if any(k in obj for k in ("request_throughput", "output_throughput", "mean_ttft_ms")):
        kind = "sglang-json" if "mean_e2e_latency_ms" in obj else "vllm-json"
        return _serving_json(obj, kind, path)
    if str(schema).startswith("proctor.") and isinstance(obj.get("metrics"), dict):
        return _flat_metrics(obj, "proctor-metrics", path)
    raise ConfigError(
        f"{path or 'JSON'}: not a known result format",
        hint="expected vLLM/SGLang result JSON, proctor metrics.json or lm-eval",
    )


def parse_string(text: str, path: str | None = None) -> ParsedResult:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            return parse_json_obj(json.loads(stripped), path)
        except json.JSONDecodeError:
            lines = [ln for ln in stripped.splitlines() if ln.strip()]
            try:  # JSONL (SGLang appends one object per run): the last line wins
                return parse_json_obj(json.loads(lines[-1]), path)
            except json.JSONDecodeError:
                pass
    return parse_text(text, path)


#: What proctor itself writes in a run directory: never a result (a `proctor run` of a
#: benchmark command has only its log to give).
_OWN_FILES = frozenset(
    {
        "record.json",
        "plan.json",
        "node-record.json",
        "node-plan.json",
        "slurm.json",
        "children.json",
        "summary.json",
        "answer.json",
        "manifest.json",
        "proctor-install.json",
    }
)


def _proctors_own(path: Path) -> bool:
    return path.name in _OWN_FILES or path.name.startswith(".")


def find_result_file(directory: Path) -> Path:
    """The result file inside a run directory (metrics.json first, then lm-eval, then logs)."""
    for pattern in ("metrics.json", "**/results_*.json", "*.json", "*.log", "*.txt"):
        found = sorted(p for p in directory.glob(pattern) if not _proctors_own(p))
        if found:
            return found[-1]
    raise UsageError(
        f"no result file in {directory}",
        hint="give the file itself, or a run directory holding metrics.json",
    )


def parse_path(path: str | Path) -> ParsedResult:
    """Metrics from a results file (vLLM/SGLang/ATOM serving JSON, lm-eval JSON, proctor
    metrics.json, or their text output)."""
    p = Path(path)
    run_dir = p if p.is_dir() else None
    if run_dir is not None:
        p = find_result_file(run_dir)
    read = read_bounded(p)  # bounded in memory and time, whatever the input is
    try:
        result = parse_string(read.data.decode(errors="replace"), str(p))
    except ProctorError as error:
        if read.cut:
            error.message = f"{error.message} ({read.cut})"
        raise
    if read.cut:
        result.meta["input_cut"] = read.cut
    if run_dir is not None:  # the controller's cost beside the evidence (results/cost.py)
        for name, value in cost_metrics(run_dir).items():
            result.metrics.setdefault(name, Metric.of(name, value))
    return result
