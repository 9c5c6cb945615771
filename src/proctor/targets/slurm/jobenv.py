"""The secrets of the submitting shell kept out of sbatch's saved environment.

sbatch exports its whole environment to the job by default, and slurmctld saves that on its
disk (`StateSaveLocation/hash.N/job.N/environment`). So, where sbatch runs, every variable that
proctor's secret rules (`proctor.redact.is_secret_name`) call secret is taken out of sbatch's
environment and added to the job's 0600 environment file (`PROCTOR_JOB_ENV`), which the node's
runner loads, so the job still sees it, with the same value.

Where sbatch runs on the login host over SSH, the same is done there by this module:

    python -m proctor.targets.slurm.jobenv   (stdin: {"argv", "env", "job_env", "secret_names"})

moves the far environment's secrets into the file, then execs argv with env added. Like the
node's runner it imports no pydantic: only proctor.redact.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path

from proctor.redact import is_secret_name

#: The environment variable naming the job's environment file (script.RemoteLayout.job_env).
JOB_ENV = "PROCTOR_JOB_ENV"


def secrets_of(environ: Mapping[str, str], extra_names: Iterable[str] = ()) -> dict[str, str]:
    """The variables of `environ` that proctor's secret rules call secret."""
    names = tuple(extra_names)
    return {k: v for k, v in environ.items() if is_secret_name(k, names)}


def _write_private(path: Path, text: str) -> None:
    """Written whole, 0600 from its creation (never readable by others, even for a moment)."""
    tmp = path.with_name(f".{path.name}.secrets.tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(
        os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8"
    ) as handle:
        handle.write(text)
    tmp.chmod(0o600)
    os.replace(tmp, path)


def move_secrets(
    environ: MutableMapping[str, str], job_env: str, extra_names: Iterable[str] = ()
) -> list[str]:
    """Take the secret variables out of `environ` and add them to the job's environment file
    (its own values, the `--env` ones, win). Returns the names moved."""
    secrets = secrets_of(environ, extra_names)
    if not secrets:
        return []
    path = Path(job_env)
    values = json.loads(path.read_text(encoding="utf-8"))
    _write_private(path, json.dumps({**secrets, **values}))
    for name in secrets:
        del environ[name]
    return sorted(secrets)


def main() -> int:
    request = json.load(sys.stdin)
    sys.stdin.close()
    environ = dict(os.environ)
    argv = [str(a) for a in request["argv"]]
    try:
        move_secrets(environ, str(request["job_env"]), request.get("secret_names") or ())
    except (OSError, ValueError) as error:
        sys.stderr.write(f"cannot move the secrets into {request['job_env']}: {error}\n")
        return 1
    environ.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
    try:
        os.execvpe(argv[0], argv, environ)
    except OSError as error:
        sys.stderr.write(f"{argv[0]}: {error.strerror}\n")
    return 127


if __name__ == "__main__":
    sys.exit(main())
