"""Read benchmark and evaluation results from anywhere, auto-detecting the format.

Understood: the printed `Serving Benchmark Result` block of vLLM, SGLang and ATOM (labels
matched case-insensitively; the last block in a log wins), vLLM/ATOM result JSON, SGLang
result JSON or JSONL (last line), proctor's metrics.json, and lm-eval's results JSON.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, TypeGuard

from proctor.errors import ConfigError, UsageError
from proctor.results.model import ParsedResult
from proctor.results.names import json_key_to_name, label_to_name

BLOCK_START = re.compile(r"=+ *Serving Benchmark Result *=+", re.IGNORECASE)
_LINE = re.compile(r"^\s*([^:]+?):\s+(-?[0-9][0-9.,eE+-]*|inf|nan)\s*$", re.IGNORECASE)
_FILTER_SHORT = {"flexible-extract": "flexible", "strict-match": "strict", "none": ""}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def parse_summary_blocks(text: str) -> list[dict[str, float]]:
    """Every summary block in `text`, as {normalized name: value}."""
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


def parse_text(text: str, path: str | None = None) -> ParsedResult:
    blocks = parse_summary_blocks(text)
    if not blocks:
        raise ConfigError(f"no 'Serving Benchmark Result' block in {path or 'the text'}",
                          hint="give a benchmark log, result JSON or lm-eval results JSON")
    res = ParsedResult(kind="serving-summary", path=path,
                       meta={"flavour": _flavour(text), "blocks": len(blocks)})
    for name, value in blocks[-1].items():
        res.add(name, value)
    return res


def _finite(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _serving_json(obj: dict[str, Any], kind: str, path: str | None) -> ParsedResult:
    res = ParsedResult(kind=kind, path=path)
    for key, value in obj.items():
        name = json_key_to_name(key)
        if name is not None and _finite(value):
            res.add(name, value)
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


def parse_json_obj(obj: Any, path: str | None = None) -> ParsedResult:
    if not isinstance(obj, dict):
        raise ConfigError(f"{path or 'JSON'} is not a JSON object", hint="give a result JSON")
    if obj.get("schema") == "proctor.bench.metrics":
        res = _serving_json(obj.get("metrics") or {}, "proctor-metrics", path)
        res.meta.update(model=obj.get("model"), schema_version=obj.get("schema_version"),
                        started_at=obj.get("started_at"))
        return res
    results = obj.get("results")
    if isinstance(results, dict) and any(isinstance(v, dict) for v in results.values()):
        return _lm_eval(obj, path)
    if any(k in obj for k in ("request_throughput", "output_throughput", "mean_ttft_ms")):
        kind = "sglang-json" if "mean_e2e_latency_ms" in obj else "vllm-json"
        return _serving_json(obj, kind, path)
    raise ConfigError(f"{path or 'JSON'}: not a known result format",
                      hint="expected vLLM/SGLang result JSON, proctor metrics.json or lm-eval")


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


def find_result_file(directory: Path) -> Path:
    """The result file inside a run directory (metrics.json first, then lm-eval, then logs)."""
    for pattern in ("metrics.json", "**/results_*.json", "*.json", "*.log", "*.txt"):
        found = sorted(directory.glob(pattern))
        if found:
            return found[-1]
    raise UsageError(f"no result file in {directory}",
                     hint="give the file itself, or a run directory holding metrics.json")


def parse_path(path: str | Path) -> ParsedResult:
    p = Path(path)
    if p.is_dir():
        p = find_result_file(p)
    try:
        text = p.read_text(errors="replace")
    except OSError as e:
        raise UsageError(f"cannot read {p}: {e.strerror}", hint="check the path") from e
    return parse_string(text, str(p))
