"""`python -m proctor.jobs run JOB [--output-dir DIR]`: run one typed job (JSON text, or a file
holding it) in this process. What every supervised bench, sweep point, eval, offline run and
flow workload runs.

`python -m proctor.jobs submit`: a Submission (jobs/submission.py) as JSON on stdin, run as
`proctor.jobs.submit.submit` runs it here: the far side of `--target` for bench, sweep, eval,
offline, flow and server grids (no CLI on that path). With the submission's `answer`, stdout is
its one JSON document, with `error` (exit code, reason, fix) added when it fails.

`python -m proctor.jobs step`: a server workflow step (jobs/steps.py, in a StepRequest: serve
start|ready|stop, drain, inspect) as JSON on stdin, run as `proctor.jobs.step_run.step_here`
runs it here: the far side of `--target` for those commands, answered the same way.

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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from proctor import redact
from proctor.errors import ExitCode, ProctorError

if TYPE_CHECKING:
    from pydantic import BaseModel


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
    sub.add_parser("step", help="run the server workflow step on stdin here")
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
    from proctor.jobs.run import with_api_key
    from proctor.jobs.submission import Submission
    from proctor.jobs.submit import Voice, submit

    def go(held: list[Any]) -> tuple[bool, Callable[[], int]]:
        submission = _valid(Submission, text, "invalid submission")
        submission = submission.model_copy(update={"job": with_api_key(submission.job)})
        voice = Voice(answer=held.append) if submission.answer else Voice()
        return submission.answer, lambda: submit(submission, voice=voice).status()

    return answered(go)


def step_main(text: str) -> int:
    """The step request `text` run here; under its `answer`, one JSON document on stdout."""
    from proctor.jobs.step_run import StepVoice, step_here
    from proctor.targets.remote.requests import StepRequest

    def go(held: list[Any]) -> tuple[bool, Callable[[], int]]:
        request = _valid(StepRequest, text, "invalid step request")
        voice = StepVoice(answer=held.append) if request.answer else StepVoice()
        runs_dir = None  # the runs dir where it runs: PROCTOR_RUNS_DIR, set by the far step
        return request.answer, lambda: step_here(
            request.step, answer=request.answer, runs_dir=runs_dir, voice=voice
        )

    return answered(go)


M = TypeVar("M", bound="BaseModel")


def _valid(model: type[M], text: str, what: str) -> M:
    from pydantic import ValidationError

    from proctor.errors import invalid

    try:
        return model.model_validate_json(text)
    except ValidationError as error:
        raise invalid(error, what=what) from None


def answered(go: Callable[[list[Any]], tuple[bool, Callable[[], int]]]) -> int:
    """Run what `go` makes of the held answers' list (whether it answers, and the call);
    under its answer, the last document it answered on stdout, with `error` (exit code,
    reason, fix) added when it fails: a list of rows under `result`."""
    from proctor.errors import EXIT_CODE_MEANINGS

    held: list[Any] = []
    answer = False

    def write(doc: Any) -> None:
        # Strict JSON as the CLI's --json prints it: masked field by field, nan/inf as null.
        plain = json.loads(json.dumps(_strict(doc), default=str))
        text = json.dumps(redact.data(plain), indent=2, allow_nan=False)
        stream = redact.unmasked(sys.stdout)
        stream.write(text + "\n")
        stream.flush()

    def with_error(error: dict[str, Any]) -> dict[str, Any]:
        doc = held[-1] if held else {}
        return {**doc, **error} if isinstance(doc, dict) else {"result": doc, **error}

    try:
        answer, call = go(held)
        code = call()
    except ProctorError as error:
        print(f"proctor: {error.one_line()}", file=sys.stderr, flush=True)
        if answer:
            said = {"exit_code": int(error.exit_code), "reason": error.message, "fix": error.hint}
            write(with_error({"error": said}))
        return int(error.exit_code)
    if answer and held:
        doc = held[-1]
        if code:
            try:
                reason = EXIT_CODE_MEANINGS[ExitCode(code)]
            except ValueError:
                reason = f"exit status {code}"
            doc = with_error({"error": {"exit_code": code, "reason": reason, "fix": None}})
        write(doc)
    return code


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.verb == "submit":
        return submit_main(sys.stdin.read())
    if args.verb == "step":
        return step_main(sys.stdin.read())
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
