"""proctor's validity rules applied to an imported result, as far as its figures allow.

proctor did not watch another tool's run, so most of its checks (warm-up, client headroom,
the server's own counts, conformance, saturation) cannot be made; three can, from the figures
every serving result carries, with the defaults of proctor's own bench (docs/bench.md):

    errors     a failed request is never a success: more than none failed (--max-error-rate 0),
               or none succeeded
    requests   fewer than 100 measured requests (--min-requests): a p99 of fewer is a maximum
    window     a measured duration under 10 s (--min-window)

Any of them failing makes the import INVALID, with the reasons, exactly as a proctor bench:
`check` refuses it (exit 6) and `runs compare` warns. None failing is no VALID: the verdict
is then "NOT JUDGED" (the checks that passed are listed; the rest could not be made).
"""

from __future__ import annotations

from typing import Any

from proctor.results.exchange.model import ImportedResult

MIN_REQUESTS = 100
MIN_WINDOW_S = 10.0
_UNMADE = ("warmup", "rate", "client", "server", "conformance", "saturation")


def judge_imported(res: ImportedResult) -> dict[str, Any]:
    """The validity section of an imported result's metrics.json."""
    m = res.metrics
    checks: dict[str, dict[str, Any]] = {}
    completed, failed = m.get("completed"), m.get("failed")
    if completed is None:
        checks["errors"] = {"ok": True, "detail": "not measured: the file gives no request count"}
    elif completed <= 0:
        checks["errors"] = {"ok": False, "detail": "no measured request succeeded"}
    else:
        total = completed + (failed or 0)
        checks["errors"] = {
            "ok": not failed,
            "detail": f"{failed or 0:g} of {total:g} requests failed (proctor allows none by"
            " default, --max-error-rate)",
        }
    if completed is not None:
        measured = completed + (failed or 0)
        checks["requests"] = {
            "ok": measured >= MIN_REQUESTS,
            "detail": f"{measured:g} measured requests (at least {MIN_REQUESTS} needed,"
            " --min-requests)",
        }
    duration = m.get("duration")
    if duration is not None:
        checks["window"] = {
            "ok": duration >= MIN_WINDOW_S,
            "detail": f"measured window {duration:.1f} s (at least {MIN_WINDOW_S:g} s needed,"
            " --min-window)",
        }
    for name in _UNMADE:
        checks[name] = {"ok": True, "detail": "not measured: proctor did not watch the run"}
    reasons = [f"{name}: {c['detail']}" for name, c in checks.items() if not c["ok"]]
    return {
        "verdict": "INVALID" if reasons else "NOT JUDGED",
        "reasons": reasons,
        "checks": checks,
        "source": f"proctor's rules on the figures imported from {res.tool}",
    }


__all__ = ["MIN_REQUESTS", "MIN_WINDOW_S", "judge_imported"]
