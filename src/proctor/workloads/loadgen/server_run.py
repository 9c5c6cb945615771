"""`bench --server RUN`: the server run must still be the thing that answers on its port.

A server run that has ended (its record or exit_code says so, or its wrapper is gone) is
refused: whatever listens on that port now is not what the run recorded. A live run is asked
for /v1/models, and the model it recorded (served name, else model) must be listed there.
Both refusals are TargetUnavailable (69) with what was expected and what was found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from proctor.errors import TargetUnavailable
from proctor.record.rundir import RunDir
from proctor.record.status import run_state

MODELS_TIMEOUT_S = 10.0


def server_run_facts(runs_dir: Path, ref: str) -> dict[str, Any]:
    """The server section of a live server run, with run_id, base_url and the checked model."""
    from proctor.serve import server_facts
    from proctor.supervise.refs import SERVER_KINDS, resolve_run

    run = resolve_run(runs_dir, ref, SERVER_KINDS)
    facts = dict(server_facts(run))
    facts["run_id"] = run.run_id
    check_live(run)
    host = facts.get("host") or "127.0.0.1"
    facts["base_url"] = f"http://{host}:{facts['port']}"
    expected = str(facts.get("served_model_name") or facts.get("model") or "")
    facts["checked_model"] = check_model(run.run_id, facts["base_url"], expected)
    return facts


def check_live(run: RunDir) -> None:
    state = run_state(run)
    if state.state in ("running", "starting"):
        return
    how = (
        f"ended with exit {state.exit.code}"
        if state.exit is not None
        else "is no longer running (result unknown)"
    )
    raise TargetUnavailable(
        f"server run {run.run_id} {how}; refusing to benchmark whatever listens on its port now",
        hint="start a server with `proctor serve start`, or pass --base-url to bench a URL",
    )


def served_models(base_url: str) -> list[str]:
    try:
        with httpx.Client(trust_env=False, timeout=MODELS_TIMEOUT_S) as client:
            reply = client.get(base_url + "/v1/models")
            data = reply.json()
    except (httpx.HTTPError, ValueError) as error:
        raise TargetUnavailable(
            f"the server at {base_url} did not list its models: {type(error).__name__}",
            hint="check that the server run is ready (`proctor serve ready`)",
        ) from error
    items = data.get("data") if isinstance(data, dict) else None
    if reply.status_code != 200 or not isinstance(items, list):
        raise TargetUnavailable(f"{base_url}/v1/models answered {reply.status_code} without a list")
    return [str(m["id"]) for m in items if isinstance(m, dict) and "id" in m]


def check_model(run_id: str, base_url: str, expected: str) -> str:
    """The model to benchmark: the one the run recorded, which the server must list."""
    listed = served_models(base_url)
    if not expected:
        if not listed:
            raise TargetUnavailable(f"{base_url} lists no model")
        return listed[0]
    if expected not in listed:
        found = ", ".join(listed) or "none"
        raise TargetUnavailable(
            f"server run {run_id} recorded model {expected!r}, but {base_url} serves {found}",
            hint="another server holds that port; stop it or start the run again",
        )
    return expected


def live_server_facts(ref: str, runs_dir: str | None = None) -> dict[str, Any]:
    """`server_run_facts` for `--server REF`, in the runs directory that --runs-dir, the
    environment or proctor.toml name (bench, sweep and eval share it)."""
    from proctor.spec.config import load_config
    from proctor.spec.plan import resolve_runs_dir

    return server_run_facts(Path(resolve_runs_dir(runs_dir, load_config()).value), ref)
