"""The far side of a remote workflow command: `python -m proctor.targets.remote.step`.

It is the command of one supervised far job (the same wrapper as any remote run) and runs the
typed request in its environment (PROCTOR_REQUEST: a SubmitRequest, whose submission goes to
`python -m proctor.jobs submit`, or a StepRequest, to `python -m proctor.jobs step`; on stdin,
never on a command line, and not passed on to what the command starts) with
PROCTOR_RUNS_DIR pointed at:

    --steps nested   <this job's run dir>/steps/  (flow: every step's run directory lives inside
                     the job, so one manifest covers them and one fetch brings them home)
    --steps shared   the runs dir this job is in (<ws>/proctor/runs): serve start/ready/stop,
                     drain, bench and eval find each other's runs there exactly as locally

With --answer, the inner command's stdout (its --json answer) is kept in `answer.json`.
`children.json` names the runs the inner command made or touched (from the answer, or every
run under steps/), for the controller to fetch. SIGTERM from the wrapper's kill ladder reaches
the inner proctor through the process group; this process waits for it, so a flow's teardown
finishes before the job's exit code is written.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from proctor.errors import UsageError

_RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")
REQUEST_ENV = "PROCTOR_REQUEST"


def run_ids_in(value: Any) -> list[str]:
    """Every run id under a `run_id`, `sweep`, `server_run` or `*_run` key of a JSON answer."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if (key in ("run_id", "sweep") or key.endswith("_run")) and isinstance(item, str):
                if _RUN_ID.match(item):
                    found.append(item)
            else:
                found.extend(run_ids_in(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(run_ids_in(item))
    return list(dict.fromkeys(found))


def _parse(argv: list[str]) -> tuple[str, bool]:
    steps, answer, rest = "nested", False, list(argv)
    while rest:
        flag = rest.pop(0)
        if flag == "--steps" and rest:
            steps = rest.pop(0)
        elif flag == "--answer":
            answer = True
        else:
            raise UsageError(f"unknown option {flag!r}", hint="known: --steps X, --answer")
    return steps, answer


def far_command(request: str) -> tuple[list[str], str, str]:
    """(argv, stdin, title) of the request's far command, never the CLI: a typed submission is
    run by `python -m proctor.jobs submit` (the submission's JSON on stdin), a server workflow
    step by `python -m proctor.jobs step` (the step request on stdin)."""
    from pydantic import ValidationError

    from proctor.errors import invalid
    from proctor.targets.remote.requests import StepRequest, SubmitRequest

    try:
        data = json.loads(request)
        if isinstance(data, dict) and "submission" in data:
            submit = SubmitRequest.model_validate(data)
            argv = [sys.executable, "-m", "proctor.jobs", "submit"]
            return argv, submit.submission, submit.title()
        step = StepRequest.model_validate(data)
    except ValidationError as error:
        raise invalid(error, what="proctor request") from None
    except ValueError as error:
        raise UsageError(f"invalid proctor request: {error}") from None
    return [sys.executable, "-m", "proctor.jobs", "step"], step.model_dump_json(), step.title()


def main(argv: list[str] | None = None) -> int:
    steps, want_answer = _parse(sys.argv[1:] if argv is None else argv)
    request = os.environ.get(REQUEST_ENV)
    if not request:
        raise UsageError(
            f"no request: {REQUEST_ENV} is not set", hint="proctor sends it with a --target command"
        )
    own = Path(os.environ.get("PROCTOR_RUN_DIR") or ".")
    inner = own / "steps" if steps == "nested" else own.parent if steps == "shared" else Path(steps)
    inner.mkdir(parents=True, exist_ok=True)
    drop = ("PROCTOR_RUN_DIR", "PROCTOR_RUN_ID", REQUEST_ENV)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PROCTOR_RUNS_DIR"] = str(inner)
    signal.signal(signal.SIGTERM, lambda *_: None)  # the inner proctor got it too: wait for it
    signal.signal(signal.SIGINT, lambda *_: None)
    argv, stdin, title = far_command(request)
    # Only the command's name: its options may carry secret values (--env).
    sys.stderr.write(f"proctor step: proctor {title} (runs in {inner})\n")
    sys.stderr.flush()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE if want_answer else None,
    )
    out = proc.communicate(stdin.encode())[0]  # None without --answer: stdout is the log
    proc.wait()
    answer: Any = None
    if out is not None:
        (own / "answer.json").write_bytes(out)
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        try:
            answer = json.loads(out.decode(errors="replace"))
        except json.JSONDecodeError:
            answer = None
    if steps == "nested":
        children = sorted(p.name for p in inner.iterdir() if _RUN_ID.match(p.name))
    else:
        children = [r for r in run_ids_in(answer) if (inner / r).is_dir()]
    data = {
        "runs_dir": str(inner),
        "nested": steps == "nested",
        "runs": children,
        "exit_code": proc.returncode,
    }
    (own / "children.json").write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


if __name__ == "__main__":
    from proctor.crash import guarded

    sys.exit(guarded("proctor step", main))
