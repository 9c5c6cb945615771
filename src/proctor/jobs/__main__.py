"""`python -m proctor.jobs run JOB [--output-dir DIR]`: run one typed job (JSON text, or a file
holding it) in this process. What every supervised bench, sweep point, eval, offline run and
flow workload runs.

`python -m proctor.jobs submit`: a Submission (jobs/submission.py) as JSON on stdin, run as
`proctor.jobs.submit.submit` runs it here: the far side of `--target` for bench, sweep, eval
and offline (no CLI on that path). With the submission's `answer`, stdout is its one JSON
document, with `error` (exit code, reason, fix) added when it fails.

Exit codes are proctor's (docs: errors.py): 0 ok, 3 the workload failed (more requests failed
or went unanswered than --max-error-rate allows, lm-eval or the offline command failed), 64 a
bad job, 69 the server, lm-eval or the offline command cannot be reached or started, or too
little free disk; an offline job also exits 2 when a fault line was printed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

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
    sub.add_parser("submit", help="run the submission on stdin as a run here")
    return p


def _strict(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _strict(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_strict(v) for v in data]
    return data


def submit_main(text: str) -> int:
    """The submission `text` run here; under its `answer`, one JSON document on stdout."""
    from pydantic import ValidationError

    from proctor.errors import EXIT_CODE_MEANINGS, invalid
    from proctor.jobs.run import with_api_key
    from proctor.jobs.submission import Submission
    from proctor.jobs.submit import Voice, submit

    held: list[Any] = []
    answer = False

    def write(doc: Any) -> None:
        # Strict JSON as the CLI's --json prints it: masked field by field, nan/inf as null.
        plain = json.loads(json.dumps(_strict(doc), default=str))
        text = json.dumps(redact.data(plain), indent=2, allow_nan=False)
        stream = redact.unmasked(sys.stdout)
        stream.write(text + "\n")
        stream.flush()

    try:
        try:
            submission = Submission.model_validate_json(text)
        except ValidationError as error:
            raise invalid(error, what="invalid submission") from None
        answer = submission.answer
        submission = submission.model_copy(update={"job": with_api_key(submission.job)})
        voice = Voice(answer=held.append) if answer else Voice()
        code = submit(submission, voice=voice).status()
    except ProctorError as error:
        print(f"proctor: {error.one_line()}", file=sys.stderr, flush=True)
        if answer:
            said = {"exit_code": int(error.exit_code), "reason": error.message, "fix": error.hint}
            doc = held[-1] if held and isinstance(held[-1], dict) else {}
            write({**doc, "error": said})
        return int(error.exit_code)
    if answer and held:
        doc = held[-1]
        if code and isinstance(doc, dict):
            try:
                reason = EXIT_CODE_MEANINGS[ExitCode(code)]
            except ValueError:
                reason = f"exit status {code}"
            doc = {**doc, "error": {"exit_code": code, "reason": reason, "fix": None}}
        write(doc)
    return code


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.verb == "submit":
        return submit_main(sys.stdin.read())
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
