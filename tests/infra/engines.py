"""Real inference engines for tests: vLLM for CPU and `transformers serve`, serving SmolLM2-135M.

`.ci/setup-engines.sh` installs them under ${PROCTOR_TEST_CACHE:-~/.cache/proctor-test} and
writes engines.json there; `engine_info()` reads it. Without it, engine tests are skipped with
the reason, unless PROCTOR_REQUIRE_ENGINES=1, when they fail (CI sets it after the install).

Use the session fixtures in a test module with
    from tests.infra.engines import vllm_server  # noqa: F401
One server is shared by every module that imports the fixture (vLLM takes ~25 s to start):
each module's session-scoped fixture takes a reference, and the last one released stops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.fake_openai_server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "smollm2"


def cache_dir() -> Path:
    env = os.environ.get("PROCTOR_TEST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "proctor-test"


def gsm8k_data_dir() -> Path:
    """The GSM8K subset in the repository (MIT, tests/data/gsm8k/SOURCE.md)."""
    return REPO_ROOT / "tests" / "data" / "gsm8k"


@dataclass(frozen=True)
class EngineInfo:
    vllm_python: Path
    vllm_version: str
    model_dir: Path
    served_model_name: str
    tf_python: Path | None
    tf_version: str | None


def _missing(reason: str) -> Any:
    if os.environ.get("PROCTOR_REQUIRE_ENGINES") == "1":
        pytest.fail(f"{reason} (PROCTOR_REQUIRE_ENGINES=1)")
    pytest.skip(f"{reason}; run .ci/setup-engines.sh")


def engine_info() -> EngineInfo:
    path = cache_dir() / "engines.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return _missing(f"no engine install recorded at {path}")  # type: ignore[no-any-return]
    tf = data.get("transformers_serve") or {}
    info = EngineInfo(
        vllm_python=Path(data["vllm"]["python"]),
        vllm_version=data["vllm"]["version"],
        model_dir=Path(data["model_dir"]),
        served_model_name=data.get("served_model_name", SERVED_NAME),
        tf_python=Path(tf["python"]) if tf.get("python") else None,
        tf_version=tf.get("version"),
    )
    for p in (info.vllm_python, info.model_dir / "config.json"):
        if not p.exists():
            return _missing(f"{p} named in {path} is missing")  # type: ignore[no-any-return]
    return info


@dataclass
class EngineServer:
    kind: str  # "vllm" | "transformers-serve"
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    model: str  # the value requests must send in "model"
    ready_s: float = 0.0
    argv: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM the server's process group, wait, then SIGKILL it. Idempotent."""
        return stop_group(self.proc, grace_s)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> int | None:
    pgid = proc.pid  # started with start_new_session: its pid is the group id
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; children (vLLM's engine core) may linger in the group.
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return proc.returncode
            time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    return proc.returncode


def _spawn(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def wait_healthy(server: EngineServer, timeout_s: float) -> None:
    """Poll /health until 200; fail fast, with the log tail, if the server exits."""
    started = time.monotonic()
    with httpx.Client(timeout=2.0) as client:
        while True:
            if server.proc.poll() is not None:
                raise RuntimeError(
                    f"{server.kind} exited with {server.proc.returncode} before ready:\n"
                    + server.log_tail()
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{server.base_url}/health").status_code == 200:
                    server.ready_s = time.monotonic() - started
                    return
            if time.monotonic() - started > timeout_s:
                server.stop()
                raise RuntimeError(
                    f"{server.kind} not ready in {timeout_s:.0f} s:\n" + server.log_tail()
                )
            time.sleep(0.25)


def _base_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    # No hub here; and keep the engines from phoning home.
    env.update(HF_HUB_OFFLINE="1", DO_NOT_TRACK="1", VLLM_NO_USAGE_STATS="1")
    # Log lines reach the file as they are written (tests and monitors read it live).
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def vllm_argv(info: EngineInfo, port: int) -> list[str]:
    return [
        str(info.vllm_python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(info.model_dir),
        "--served-model-name",
        info.served_model_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--enforce-eager",
        # vLLM casts a float32 checkpoint to half precision by default; bf16 answers nonsense.
        "--dtype",
        "float32",
        # "Received request cmpl-ID-0" lines: the x-request-id proctor sent, found in the log
        # (tests/workloads/test_real_vllm_workloads.py).
        "--enable-log-requests",
    ]


def start_vllm(
    port: int, log_path: Path, info: EngineInfo | None = None, timeout_s: float = 240.0
) -> EngineServer:
    info = info or engine_info()
    argv = vllm_argv(info, port)
    proc = _spawn(argv, _base_env({"VLLM_CPU_KVCACHE_SPACE": "1"}), log_path)
    server = EngineServer("vllm", proc, port, log_path, info.served_model_name, argv=argv)
    wait_healthy(server, timeout_s)
    return server


def start_transformers_serve(
    port: int, log_path: Path, info: EngineInfo | None = None, timeout_s: float = 120.0
) -> EngineServer:
    info = info or engine_info()
    if info.tf_python is None:
        return _missing("transformers serve was not installed")  # type: ignore[no-any-return]
    # Its /v1/models scans the HF cache and answers 500 when the folder is missing.
    hf_home = log_path.parent / "hf-home"
    (hf_home / "hub").mkdir(parents=True, exist_ok=True)
    exe = info.tf_python.parent / "transformers"
    argv = [str(exe), "serve", str(info.model_dir), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--device", "cpu"]
    proc = _spawn(argv, _base_env({"HF_HOME": str(hf_home)}), log_path)
    # transformers serve wants the model field to equal the served path.
    model = str(info.model_dir)
    server = EngineServer("transformers-serve", proc, port, log_path, model, argv=argv)
    wait_healthy(server, timeout_s)
    return server


# One server per kind per pytest process, shared across modules by reference count.
_shared: dict[str, tuple[EngineServer, int]] = {}


def _acquire(kind: str, tmp_root: Path) -> EngineServer:
    if kind in _shared:
        server, refs = _shared[kind]
        _shared[kind] = (server, refs + 1)
        return server
    log = tmp_root / f"{kind}.log"
    start = start_vllm if kind == "vllm" else start_transformers_serve
    server = start(free_port(), log)
    _shared[kind] = (server, 1)
    return server


def _release(kind: str) -> None:
    server, refs = _shared[kind]
    if refs > 1:
        _shared[kind] = (server, refs - 1)
        return
    del _shared[kind]
    # The suite's check that stop() leaves nothing of the group (vLLM's EngineCore included),
    # made on the shared server instead of starting one more vLLM (~40 s) for it.
    code = server.stop()
    try:
        os.killpg(server.proc.pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise RuntimeError(f"{kind}: processes of group {server.proc.pid} left after stop()")
    if server.proc.returncode is None or server.stop() != code:
        raise RuntimeError(f"{kind}: stop() did not reap the leader or is not idempotent")


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    info = engine_info()
    del info  # checked first so a missing install skips before any temp dir is made
    server = _acquire("vllm", tmp_path_factory.mktemp("vllm"))
    yield server
    _release("vllm")


@pytest.fixture(scope="session")
def tf_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    engine_info()
    server = _acquire("transformers-serve", tmp_path_factory.mktemp("tf-serve"))
    yield server
    _release("transformers-serve")
