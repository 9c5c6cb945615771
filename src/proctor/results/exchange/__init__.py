"""Results in and out of proctor: exports others can read, imports of others' results.

    export_run(run_dir, "br-0.2")      llm-d's Benchmark Report v0.2 (br.py)
    export_run(run_dir, "proctor")     proctor's own export (native.py; schema committed)
    read_result_file(path, fmt=None)   (format, [ImportedResult]): vLLM --save-result JSON,
                                       GuideLLM benchmarks JSON, AIPerf profile export,
                                       a Benchmark Report (JSON or YAML), a proctor export;
                                       the format found from the file unless `fmt` forces it

Pure functions of files, like the rest of `results`; writing an imported run is the record
layer's (`proctor.record.imported.import_file`). An imported run is an ordinary run directory
written by the one Recorder: record.json (kind
"imported", `imported`: the tool, format, the file's name and sha256, what it lacks),
metrics.json (`schema: proctor.imported.metrics`, proctor's metric names and units), the
original file, exit_code 0, manifest.sha256 and the store row; so `runs list`, `runs
compare` and `check` treat it as any result.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from proctor.errors import UsageError
from proctor.results.exchange.model import ImportedResult

#: Export formats (`results export --format`).
EXPORT_FORMATS = ("proctor", "br-0.2")
#: Import formats (`results import --format`), in the order autodetection tries them.
IMPORT_FORMATS = ("proctor", "br-0.2", "guidellm", "aiperf", "vllm")
IMPORTED_SCHEMA = "proctor.imported.metrics"
_WHAT = (
    "vLLM --save-result JSON, GuideLLM benchmarks JSON, AIPerf profile_export_aiperf.json,"
    " an llm-d Benchmark Report v0.2, or a proctor export"
)


def export_run(run_dir: Path, fmt: str) -> dict[str, Any]:
    """The export of one run directory in `fmt` (EXPORT_FORMATS), as a JSON-ready dict."""
    from proctor.results.exchange.exporting import export_br, export_native

    if fmt == "br-0.2":
        return export_br(run_dir)
    if fmt == "proctor":
        return export_native(run_dir)
    raise UsageError(
        f"unknown export format {fmt!r}", hint=f"choose one of {', '.join(EXPORT_FORMATS)}"
    )


def detect(obj: Any) -> str | None:
    """The import format of a loaded document, or None."""
    if not isinstance(obj, dict):
        return None
    if obj.get("schema") == "proctor.results.export":
        return "proctor"
    if isinstance(obj.get("run"), dict) and "results" in obj and "uid" in obj["run"]:
        return "br-0.2"
    benchmarks = obj.get("benchmarks")
    first = benchmarks[0] if isinstance(benchmarks, list) and benchmarks else None
    if isinstance(first, dict) and "metrics" in first:
        return "guidellm"
    if isinstance(obj.get("records"), dict) or (
        "input_config" in obj
        and (
            "records" in obj
            or any(isinstance(v, dict) and "avg" in v and "unit" in v for v in obj.values())
        )
    ):
        return "aiperf"
    serving = any(k in obj for k in ("mean_ttft_ms", "request_throughput", "output_throughput"))
    # SGLang's result JSON (mean_e2e_latency_ms) is no vLLM result: `results parse` reads it
    return "vllm" if serving and "mean_e2e_latency_ms" not in obj else None


def _readers() -> dict[str, Callable[[dict[str, Any], str], list[ImportedResult]]]:
    from proctor.results.exchange.br import read_br
    from proctor.results.exchange.exporting import read_native
    from proctor.results.exchange.peers import read_aiperf, read_guidellm, read_vllm

    return {
        "proctor": read_native,
        "br-0.2": read_br,
        "guidellm": read_guidellm,
        "aiperf": read_aiperf,
        "vllm": read_vllm,
    }


def read_result_file(path: Path, fmt: str | None = None) -> tuple[str, list[ImportedResult]]:
    """(the format, the results) of another tool's result file; UsageError (exit 64, one
    line) for a file that is none of IMPORT_FORMATS, or not one that `fmt` names."""
    from proctor.results.exchange.loading import load_document

    if fmt is not None and fmt not in IMPORT_FORMATS:
        raise UsageError(
            f"unknown import format {fmt!r}", hint=f"choose one of {', '.join(IMPORT_FORMATS)}"
        )
    obj = load_document(path)
    found = fmt or detect(obj)
    if found is None:
        raise UsageError(
            f"{path}: not a result proctor can import",
            hint=f"give {_WHAT}; --format forces one",
        )
    if not isinstance(obj, dict):
        raise UsageError(f"{path}: a {found} result is a JSON object, this is not one")
    return found, _readers()[found](obj, str(path))


__all__ = [
    "EXPORT_FORMATS",
    "IMPORTED_SCHEMA",
    "IMPORT_FORMATS",
    "ImportedResult",
    "detect",
    "export_run",
    "read_result_file",
]
