"""The submitting shell's secrets moved out of sbatch's environment into the job-env file
(targets/slurm/jobenv.py), in-process and as the far-side runner, on real files and processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from proctor.targets.slurm.jobenv import move_secrets

_PRINT_ENV = "import json,os;print(json.dumps(dict(os.environ)))"


def _job_env(tmp_path: Path, values: dict[str, str]) -> Path:
    path = tmp_path / ".job-env.json"
    path.write_text(json.dumps(values))
    path.chmod(0o600)
    return path


def test_secret_variables_move_into_the_file_and_given_values_win(tmp_path: Path) -> None:
    path = _job_env(tmp_path, {"PROCTOR_WRAPPER_ARGV": "[]", "API_TOKEN": "from-env-flag"})
    environ = {
        "HF_TOKEN": "hf-value",
        "API_TOKEN": "exported",
        "MY_PRIVATE_VAR": "private",
        "MAX_TOKENS": "128",
        "PATH": "/usr/bin",
    }
    moved = move_secrets(environ, str(path), ["MY_PRIVATE_VAR"])
    assert moved == ["API_TOKEN", "HF_TOKEN", "MY_PRIVATE_VAR"]
    assert environ == {"MAX_TOKENS": "128", "PATH": "/usr/bin"}
    assert json.loads(path.read_text()) == {
        "PROCTOR_WRAPPER_ARGV": "[]",
        "API_TOKEN": "from-env-flag",
        "HF_TOKEN": "hf-value",
        "MY_PRIVATE_VAR": "private",
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # none left behind


def test_the_runner_execs_without_the_secrets_and_with_the_given_env(tmp_path: Path) -> None:
    path = _job_env(tmp_path, {"PROCTOR_WRAPPER_ARGV": "[]"})
    request = {
        "argv": [sys.executable, "-c", _PRINT_ENV],
        "env": {"PROCTOR_JOB_ENV": str(path)},
        "job_env": str(path),
        "secret_names": ["MY_PRIVATE_VAR"],
    }
    env = {
        **os.environ,
        "HF_TOKEN": "hf-runner-value",
        "MY_PRIVATE_VAR": "p-value",
        "PLAIN_SETTING": "kept",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "proctor.targets.slurm.jobenv"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert "HF_TOKEN" not in seen and "MY_PRIVATE_VAR" not in seen
    assert seen["PLAIN_SETTING"] == "kept" and seen["PROCTOR_JOB_ENV"] == str(path)
    values = json.loads(path.read_text())
    assert values["HF_TOKEN"] == "hf-runner-value" and values["MY_PRIVATE_VAR"] == "p-value"


def test_the_runner_refuses_to_submit_when_the_file_is_missing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    missing = tmp_path / "gone.json"
    request = {"argv": ["touch", str(marker)], "env": {}, "job_env": str(missing)}
    proc = subprocess.run(
        [sys.executable, "-m", "proctor.targets.slurm.jobenv"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env={**os.environ, "HF_TOKEN": "x-value"},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1 and str(missing) in proc.stderr
    assert not marker.exists() and not missing.exists()
