"""Real runs for the report tests: `proctor run` of the load generator against the fake
OpenAI server, a sweep of them sharing a group, and GSM8K through real lm-eval against a
loopback server answering from the answer key.

GPU samples come from the real sampler in the run wrapper, reading a stand-in `nvidia-smi`
(first on PATH) whose memory figure the workload command sets: high while the benchmark
runs, back to the baseline afterwards, so the timeline has a visible spike and a release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.answer_key_server import answer_key_server
from tests.fixtures.fake_openai_server import free_port
from tests.helpers import REPO

FAKE_SERVER = REPO / "tests" / "fixtures" / "fake_openai_server.py"
BASE_MIB = 512
BUSY_MIB = 9000

#: Shell: wait (60 s at most) for the wrapper's first GPU sample on disk, the baseline a report
#: compares the end with, before the stand-in GPU's memory goes up (the wrapper takes it before
#: the command starts; this keeps the timeline's first rows at the baseline too).
AFTER_FIRST_SAMPLE = (
    'i=0; until [ -f "$PROCTOR_RUN_DIR/gpu.csv" ] && '
    '[ "$(wc -l < "$PROCTOR_RUN_DIR/gpu.csv")" -ge 2 ]; do i=$((i+1)); '
    '[ "$i" -gt 1200 ] && break; sleep 0.05; done'
)

FAKE_SMI = """#!{py}
import os, sys
state = os.environ.get("FAKE_GPU_STATE", "")
try:
    used = float(open(state).read().strip())
except (OSError, ValueError):
    used = {base}
args = " ".join(sys.argv[1:])
if "--query-gpu" in args:
    print(f"0, GPU-11111111-aaaa, NVIDIA H200, {{used:.0f}}, 143771, 40, 570.1")
    print(f"1, GPU-22222222-bbbb, NVIDIA H200, {{used / 2:.0f}}, 143771, 20, 570.1")
elif "--query-compute-apps" in args:
    pass
else:
    sys.exit(2)
"""


@dataclass
class Env:
    runs_dir: Path
    env: dict[str, str]
    state: Path


def make_env(root: Path) -> Env:
    tools = root / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    smi = tools / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(py=sys.executable, base=BASE_MIB))
    smi.chmod(0o755)
    state = root / "gpu-state"
    state.write_text(f"{BASE_MIB}\n")
    runs = root / "runs"
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "PROCTOR_RUNS_DIR": str(runs),
        "FAKE_GPU_STATE": str(state),
        "COLUMNS": "200",
    }
    return Env(runs, env, state)


# `report` is a top-level command the lead mounts in cli/groups.py; until then, mount it here.
CLI = (
    "import sys; from proctor.cli import main as m, groups as g, report as r\n"
    "if ('report', None) not in g.GROUPS: r.register(m.app)\n"
    "sys.exit(m.main(sys.argv[1:]))"
)


def proctor(env: Env, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, with `report` mounted."""
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        env=env.env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
    )


@contextmanager
def fake_server(*args: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_SERVER), "--port", str(port), "--no-access-log", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        for line in proc.stdout:
            if "Application startup complete." in line or time.monotonic() > deadline:
                break
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(10)


def workload(env: Env, argv: list[str]) -> list[str]:
    """A shell command: GPU memory up, the workload into $PROCTOR_RUN_DIR, memory back down."""
    quoted = " ".join(_sh(a) for a in argv)
    script = (
        f'{AFTER_FIRST_SAMPLE}; echo {BUSY_MIB} > "$FAKE_GPU_STATE"; sleep 0.6; {quoted} --output-dir '
        f'"$PROCTOR_RUN_DIR"; rc=$?; sleep 0.4; echo {BASE_MIB} > "$FAKE_GPU_STATE"; '
        "sleep 0.6; exit $rc"
    )
    return ["sh", "-c", script]


def _sh(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def bench_argv(url: str, concurrency: int, prompts: int, osl: int = 8) -> list[str]:
    return [
        sys.executable,
        "-m",
        "proctor.workloads.loadgen",
        "--base-url",
        url,
        "--isl",
        "16",
        "--osl",
        str(osl),
        "--concurrency",
        str(concurrency),
        "--num-prompts",
        str(prompts),
        "--num-warmups",
        "2",
        "--percentiles",
        "50,90,99",
        "--save-detailed",
        "--no-progress",
    ]


def run_id_of(result: subprocess.CompletedProcess[str]) -> str:
    for line in result.stderr.splitlines():
        if line.startswith("proctor: run "):
            return line.split()[2]
    raise AssertionError(f"no run id in: {result.stderr[-1500:]}")


def bench_run(env: Env, url: str, name: str, concurrency: int, prompts: int) -> str:
    r = proctor(
        env,
        "run",
        "--name",
        name,
        "--gpu-sample",
        "0.2",
        "--",
        *workload(env, bench_argv(url, concurrency, prompts)),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return run_id_of(r)


def bench_with_repeats(env: Env, repeats: int) -> str:
    """A real `proctor bench --repeat N` against the fake server as a process: its run id."""
    from tests.fixtures.fake_openai_server import FakeServer

    with FakeServer() as srv:
        r = proctor(
            env,
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "2",
            "--num-prompts",
            "6",
            "--num-warmups",
            "1",
            "--repeat",
            str(repeats),
            "--json",
        )
    assert r.returncode == 0, r.stderr[-2000:]
    return str(json.loads(r.stdout)["run_id"])


def sweep_runs(env: Env, url: str, group: str, levels: list[int], prompts: int) -> list[str]:
    """One run per concurrency level, each recorded with the same group (the library API:
    `proctor run` has no --group flag)."""
    from proctor.spec.config import load_config
    from proctor.spec.plan import RunFlags, resolve_run_plan
    from proctor.supervise.launch import RunSpec, start_run, wait_run

    ids: list[str] = []
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env.env)  # the wrapper inherits this process's environment
    try:
        for c in levels:
            flags = RunFlags(
                argv=workload(env, bench_argv(url, c, prompts)),
                name=f"{group}-c{c}",
                gpu_sample=0.2,
                cwd=str(REPO),
            )
            plan = resolve_run_plan(flags, load_config(), env.env)
            started = start_run(plan, RunSpec(kind="bench", group=group))
            state = wait_run(started.run, timeout=180)
            assert state.exit is not None and state.exit.code == 0, state
            _wait_final(started.run.path)
            ids.append(started.run.run_id)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return ids


def _wait_final(run_dir: Path, timeout: float = 30) -> None:
    """The wrapper writes the manifest last, after exit_code: wait for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "manifest.sha256").exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"no manifest in {run_dir}")


# -- GSM8K -------------------------------------------------------------------------------------
@contextmanager
def answer_key_url(data: Path) -> Iterator[str]:
    """The base URL of a loopback server answering GSM8K from the answer key of `data`."""
    with answer_key_server(data) as server:
        yield server.base_url


def gsm8k_run(env: Env, url: str, data: Path, name: str = "gsm8k-l5") -> str:
    argv = [
        sys.executable,
        "-m",
        "proctor.workloads.gsm8k",
        "--base-url",
        url,
        "--model",
        "m1",
        "--fewshot",
        "3",
        "--limit",
        "5",
        "--num-concurrent",
        "2",
        "--data",
        str(data),
    ]
    with_hf = Env(env.runs_dir, {**env.env, "HF_HOME": str(env.runs_dir.parent / "hf")}, env.state)
    r = proctor(with_hf, "run", "--name", name, "--gpu-sample", "0.2", "--", *workload(env, argv))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    return run_id_of(r)
