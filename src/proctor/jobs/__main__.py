"""`python -m proctor.jobs run JOB [--output-dir DIR]`: run one typed job (JSON text, or a file
holding it) in this process. What every supervised bench, sweep point, eval, offline run and
flow workload runs.

Exit codes are proctor's (docs: errors.py): 0 ok, 3 the workload failed (more requests failed
or went unanswered than --max-error-rate allows, lm-eval or the offline command failed), 64 a
bad job, 69 the server, lm-eval or the offline command cannot be reached or started, or too
little free disk; an offline job also exits 2 when a fault line was printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from proctor import redact
from proctor.errors import ExitCode, ProctorError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m proctor.jobs", description=__doc__)
    sub = p.add_subparsers(dest="verb", required=True)
    run = sub.add_parser("run", help="run one job here")
    run.add_argument("job", metavar="JOB", help="the job as JSON, or a file holding it")
    run.add_argument(
        "--output-dir",
        type=Path,
        help="where the job writes metrics.json (default: $PROCTOR_RUN_DIR, the run's directory)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from proctor.jobs.run import load_job, run_job

    try:
        job = load_job(args.job)
        return run_job(job, output_dir=args.output_dir, say=lambda line: print(line, flush=True))
    except ProctorError as e:
        print(f"proctor: {e.one_line()}", file=sys.stderr, flush=True)
        return int(e.exit_code)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)


if __name__ == "__main__":
    redact.mask_output()  # a URL with credentials must not reach the run's log through us
    from proctor.crash import guarded

    sys.exit(guarded("proctor job", main))
