"""The far side of a remote run: `python -m proctor.targets.remote.agent CMD`, JSON on stdin,
validated by the command's request model (targets/remote/requests.py).

It calls exactly the code a local run uses (source.inspect_checkout/unpack_and_verify,
supervise.launch.start_run, record.status), so the remote run directory is made as locally.
The answer is one JSON line on stdout ({"ok": true, ...} or {"ok": false, "type": ..., ...});
`follow` streams log bytes on stdout and puts its answer on stderr.

Secrets in the job's env arrive on stdin and go only into the wrapper's environment.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from proctor.errors import ProctorError, UsageError
from proctor.targets.remote.requests import (
    REQUESTS,
    FollowRequest,
    InspectRequest,
    ProbeRequest,
    ProctorRequest,
    RunRequest,
    StartRequest,
    StoreRequest,
    UnpackRequest,
    VenvRequest,
    request_for,
)


def _run_dir(req: RunRequest) -> Any:
    from proctor.record.rundir import RunDir, is_run_id

    run_id = req.run_id
    path = Path(req.runs_dir) / run_id
    if not is_run_id(run_id) or not path.is_dir():
        raise UsageError(f"no run {run_id!r} in {req.runs_dir} on this host")
    return RunDir(path)


def _status(run: Any) -> dict[str, Any]:
    from proctor.targets.local import status_of

    s = status_of(run)
    return {
        "state": s.state,
        "exit_code": s.exit_code,
        "exit_signal": s.exit_signal,
        "wrapper_alive": s.wrapper_alive,
        "outcome": s.outcome,
        "exit_reason": s.exit_reason,
    }


def probe(req: ProbeRequest) -> dict[str, Any]:
    import platform

    from proctor.version import PACKAGE_DIR, __version__

    return {
        "python": sys.executable,
        "python_version": platform.python_version(),
        "proctor_version": __version__,
        "proctor_file": str(PACKAGE_DIR / "__init__.py"),
        "cwd": os.getcwd(),
    }


def _report(report: Any) -> dict[str, Any]:
    source_id = (
        report.shipped.source_id
        if report.shipped
        else (report.identity.source_id if report.identity else None)
    )
    return {
        "path": report.path,
        "state": report.state,
        "source_id": source_id,
        "matches": report.matches,
        "mismatches": report.mismatches,
        "summary": report.summary(),
        "dirty": report.dirty,
        "modified": report.modified,
        "untracked": report.untracked,
    }


def check_source(path: str, expected: Any) -> Any:
    """Inspect `path` against `expected`: manifest, source id, commit, submodule revisions."""
    from proctor.source.archive import inspect_checkout

    report = inspect_checkout(path, expected)
    if expected is not None and report.shipped is not None:
        have = report.shipped.identity
        if have.commit != expected.commit:
            report.mismatches.append(f"commit {have.commit} is not the expected {expected.commit}")
        want = {s.path: s.recorded_commit for s in expected.submodules}
        got = {s.path: s.recorded_commit for s in have.submodules}
        if want != got:
            report.mismatches.append(f"submodule revisions {got} are not the expected {want}")
    return report


def inspect(req: InspectRequest) -> dict[str, Any]:
    return _report(check_source(req.path, req.identity))


def unpack(req: UnpackRequest) -> dict[str, Any]:
    from proctor.record.manifest import sha256_file
    from proctor.source.archive import SourceMismatch, unpack_and_verify

    archive = Path(req.archive)
    try:
        if req.sha256 and sha256_file(archive) != req.sha256:
            raise SourceMismatch(
                f"the source archive {archive} arrived corrupted (sha256 differs)",
                hint="retry the sync",
            )
        report = unpack_and_verify(archive, req.dest)
    finally:
        archive.unlink(missing_ok=True)
    return _report(report)


def store(req: StoreRequest) -> dict[str, Any]:
    """Write a shipped file atomically, if its bytes are the ones named (else nothing)."""
    import base64
    import hashlib

    data = base64.b64decode(req.data_b64)
    got = hashlib.sha256(data).hexdigest()
    if got != req.sha256:
        raise UsageError(f"shipped file {req.dest}: sha256 {got} is not {req.sha256}")
    dest = Path(req.dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    return {
        "path": str(dest),
        "sha256": hashlib.sha256(dest.read_bytes()).hexdigest(),
        "bytes": len(data),
    }


def start(req: StartRequest) -> dict[str, Any]:
    from proctor.source.archive import ensure_matches
    from proctor.spec.config import load_config
    from proctor.supervise.launch import RunSpec, start_run
    from proctor.targets.local import plan_for_job

    checkout = Path(req.checkout)
    # Verify again right before running: the checkout may have changed since the sync.
    report = ensure_matches(check_source(str(checkout), req.identity))
    job = req.job
    config_file = checkout / "proctor.toml"
    config = load_config(config_file) if config_file.is_file() else None
    plan = plan_for_job(job, Path(req.runs_dir), checkout, config)
    target = dict(req.target)
    target["checkout"] = str(checkout)
    extra = dict(job.extra)
    if req.identity is not None:
        # The far checkout is an unpacked archive, not git: record the identity that was shipped
        # and verified, with where it was found.
        extra["source"] = {
            **req.identity.model_dump(mode="json"),
            "repo_root": None,
            "path": str(checkout),
            "verified_on_target": _report(report),
        }
    spec = RunSpec(group=job.group, target=target, extra=extra)
    started = start_run(plan, spec)
    run = started.run
    return {
        "run_id": run.run_id,
        "dir": str(run.path),
        "log": run.log_path().name,
        "attached": started.attached,
        "source_check": _report(report),
    }


def run_proctor(req: ProctorRequest) -> dict[str, Any]:
    """The request's proctor command (step.far_command: a typed submission, or a server
    workflow step, each run by `python -m proctor.jobs`) in the verified checkout with the far
    runs dir, waited for here: for commands that only start detached runs (serve start), which
    must not be a job's children (a job's wrapper stops what its command leaves behind)."""
    import subprocess

    from proctor.source.archive import ensure_matches

    checkout = req.checkout
    ensure_matches(check_source(checkout, req.identity))
    env = {k: v for k, v in os.environ.items() if k not in ("PROCTOR_RUN_DIR", "PROCTOR_RUN_ID")}
    env["PROCTOR_RUNS_DIR"] = req.runs_dir
    from proctor.targets.remote.step import far_command

    argv, stdin, _ = far_command(req.request.model_dump_json())
    proc = subprocess.run(
        argv,
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        input=stdin,
    )
    return {"exit_code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-8000:]}


def status(req: RunRequest) -> dict[str, Any]:
    return _status(_run_dir(req))


def stop(req: RunRequest) -> dict[str, Any]:
    from proctor.supervise.launch import request_stop

    run = _run_dir(req)
    return {"sent": request_stop(run), **_status(run)}


def listing(req: RunRequest) -> dict[str, Any]:
    run = _run_dir(req)
    files = sorted(
        p.relative_to(run.path).as_posix()
        for p in run.path.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    return {"files": files, **_status(run)}


def follow(req: FollowRequest) -> dict[str, Any]:
    """Stream the log from `offset` to stdout until the run is done (or at once)."""
    from proctor.record.status import run_state

    run = _run_dir(req)
    out = sys.stdout.buffer
    log = run.log_path()
    offset, until_done = req.offset, req.until_done
    while not log.exists() and run_state(run).state == "starting":
        time.sleep(0.05)
    with log.open("rb") as handle:
        handle.seek(offset)
        while True:
            chunk = handle.read(1 << 16)
            if chunk:
                out.write(chunk)
                continue
            out.flush()
            state = run_state(run)
            done = state.state in ("finished", "unknown") and not state.wrapper_alive
            if not until_done or done:
                while chunk := handle.read(1 << 16):
                    out.write(chunk)
                out.flush()
                return _status(run)
            time.sleep(0.05)


def make_venv(req: VenvRequest) -> dict[str, Any]:
    """Create or update <ws>/proctor/venv with the shipped proctor wheel (install.py)."""
    from proctor.errors import TargetUnavailable
    from proctor.targets.remote.install import ensure_venv

    try:
        return ensure_venv(req.dest, req.wheel, req.tag)
    except (RuntimeError, OSError, ValueError) as error:
        raise TargetUnavailable(
            f"cannot make the far venv: {error}",
            hint="give the base python psutil and pydantic ([remote] "
            "venv_base), or pass --remote-python",
        ) from None


COMMANDS: dict[str, Any] = {
    "probe": probe,
    "venv": make_venv,
    "proctor": run_proctor,
    "inspect": inspect,
    "unpack": unpack,
    "start": start,
    "status": status,
    "stop": stop,
    "listing": listing,
    "follow": follow,
    "store": store,
}
assert set(COMMANDS) == set(REQUESTS)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in COMMANDS:
        sys.stdout.write(
            json.dumps(
                {"ok": False, "type": "UsageError", "error": f"usage: agent {'|'.join(COMMANDS)}"}
            )
            + "\n"
        )
        return 64
    answer_to = sys.stderr if args[0] == "follow" else sys.stdout
    try:
        raw = sys.stdin.read()
        data = json.loads(raw) if raw.strip() else {}
        if not isinstance(data, dict):
            raise UsageError(f"agent {args[0]}: the request is not a JSON object")
        request = request_for(args[0], data)
        answer: dict[str, Any] = {"ok": True, **COMMANDS[args[0]](request)}
        code = 0
    except ProctorError as error:
        answer = {
            "ok": False,
            "type": type(error).__name__,
            "error": error.message,
            "hint": error.hint,
        }
        code = int(error.exit_code)
    except Exception as error:  # answer with the reason instead of a traceback
        answer = {"ok": False, "type": "ResultUnknown", "error": f"{type(error).__name__}: {error}"}
        code = 6
    answer_to.write("\n" + json.dumps(answer, default=str) + "\n")
    answer_to.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
