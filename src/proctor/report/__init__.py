"""proctor.report: HTML reports of runs, sweeps and comparisons, and a headless-browser check.

build_report(runs_dir, refs, compare_runs=False, baseline=None, model=None) -> Report
write_report(report, path) -> Path
load_run(RunDir) -> RunView                 record, state, checks, phases, metrics, samples
run_report / sweep_report / compare_report  from loaded runs
check_page(path, screenshot=None) -> BrowserCheck   (needs Debian's chromium)
"""

from proctor.report.browser import BrowserCheck, PlotCheck, check_page, find_chromium
from proctor.report.build import (
    Report,
    Subject,
    build_report,
    compare_report,
    group_runs,
    resolve_subject,
    run_report,
    sweep_report,
    write_report,
)
from proctor.report.load import Check, Phase, RunView, load_run

__all__ = [
    "BrowserCheck",
    "Check",
    "Phase",
    "PlotCheck",
    "Report",
    "RunView",
    "Subject",
    "build_report",
    "check_page",
    "compare_report",
    "find_chromium",
    "group_runs",
    "load_run",
    "resolve_subject",
    "run_report",
    "sweep_report",
    "write_report",
]
