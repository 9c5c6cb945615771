"""The benches' streaming emulator: emu.c built with `cc` here, else pyemu.py (and it says so).

    with start_emulator(ttft_ms=0, itl_ms=0, procs=2, cores=[0, 1]) as emu:
        emu.base_url, emu.kind ("c" | "python"), emu.cpu_seconds()
    capacity = measure_capacity(emu, concurrency=256, requests=20000, osl=128, cores=[2])

measure_capacity drives the emulator with emu.c's raw load client (C, several processes) or,
without a compiler, a raw asyncio client, and turns the result into "chunks/s per fully busy
emulator": chunks/s divided by the emulator's CPU use in cores, times its number of processes.
A client figure taken while the emulator used more than half of that is flagged by the benches.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "emu.c"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build(out_dir: Path) -> tuple[Path | None, str]:
    """(binary, "") when `cc` built emu.c, else (None, why not)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no C compiler (cc/gcc) on PATH"
    binary = out_dir / "emu"
    try:
        r = subprocess.run(
            [cc, "-O2", "-o", str(binary), str(SOURCE)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{cc} could not run: {e}"
    if r.returncode != 0:
        return None, f"cc failed: {r.stderr.strip()[-300:]}"
    return binary, ""


def _proc_cpu(pid: int) -> float:
    """user+system seconds of pid and its children that were reaped (from /proc)."""
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return sum(int(x) for x in fields[11:13]) / tick
    return 0.0


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(x) for x in text.split()]
    return []


def _pinned(cmd: list[str], cores: list[int] | None) -> list[str]:
    if not cores or shutil.which("taskset") is None:
        return cmd
    return ["taskset", "-c", ",".join(map(str, cores)), *cmd]


@dataclass
class Emulator:
    kind: str  # "c" | "python"
    why: str  # why the Python fallback, "" for C
    port: int
    procs: int
    cores: list[int] | None
    proc: subprocess.Popen[str]
    binary: Path | None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        return [self.proc.pid, *_children(self.proc.pid)]

    def cpu_seconds(self) -> float:
        """CPU seconds the emulator's processes have used so far."""
        return sum(_proc_cpu(p) for p in self.pids())

    def delay_stats(self, reset: bool = False) -> dict[str, float] | None:
        """emu.c's own delay per request (kernel receive -> first token written, minus the
        configured TTFT): count, p50_us, p99_us, max_us; None for the Python emulator."""
        if self.kind != "c":
            return None
        import json
        import urllib.request

        url = f"{self.base_url}/emu/{'reset' if reset else 'stats'}"
        with urllib.request.urlopen(url, timeout=10) as r:  # loopback only
            data: dict[str, float] = json.loads(r.read())
        return data

    def late_bins(self) -> dict[int, int] | None:
        """emu.c's tokens written more than half a gap late, per 10 ms of their due time:
        {CLOCK_MONOTONIC seconds x 100 (floored): count}, the clock of the client's records
        (time.perf_counter); None for the Python emulator."""
        if self.kind != "c":
            return None
        import json
        import urllib.request

        with urllib.request.urlopen(f"{self.base_url}/emu/late", timeout=10) as r:  # loopback
            data = json.loads(r.read())
        return {int(k): int(n) for k, n in data["late"]}

    def describe(self) -> str:
        where = f"cores {self.cores}" if self.cores else "unpinned"
        what = "emu.c" if self.kind == "c" else f"Python fallback pyemu.py ({self.why})"
        return f"{what}, {self.procs} process(es), {where}"


@contextlib.contextmanager
def start_emulator(
    *,
    ttft_ms: float = 0.0,
    itl_ms: float = 0.0,
    procs: int = 1,
    cores: list[int] | None = None,
    model: str = "emulator",
    force_python: bool = False,
) -> Iterator[Emulator]:
    with tempfile.TemporaryDirectory(prefix="emu-") as tmp:
        binary, why = (None, "asked for (--python-emulator)") if force_python else build(Path(tmp))
        port = free_port()
        args = [
            "--port",
            str(port),
            "--procs",
            str(procs),
            "--ttft-ms",
            str(ttft_ms),
            "--itl-ms",
            str(itl_ms),
            "--model",
            model,
        ]
        if binary is not None:
            cmd = [str(binary), "serve", *args]
        else:
            cmd = [sys.executable, str(HERE / "pyemu.py"), *args]
        proc = subprocess.Popen(
            _pinned(cmd, cores), stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if not line.startswith("ready"):
                raise SystemExit(f"the emulator did not start: {line!r}")
            time.sleep(0.2)  # children listening
            yield Emulator("c" if binary else "python", why, port, procs, cores, proc, binary)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class Capacity:
    client: str  # "emu.c load" | "python raw"
    concurrency: int
    chunks_s: float
    req_s: float
    ttft_ms: float
    emu_cores_busy: float  # emulator CPU seconds per wall second
    per_busy_emulator: float  # chunks/s the emulator would serve with all its processes busy


async def _py_load(port: int, conc: int, n: int, osl: int) -> tuple[int, int, float]:
    import json

    body = json.dumps(
        {
            "model": "m",
            "prompt": "a b c d",
            "max_tokens": osl,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    req = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    left, chunks, done, ttft = n, 0, 0, 0.0

    async def conn() -> None:
        nonlocal left, chunks, done, ttft
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**22)
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            writer.write(req)
            first, tail = True, b""
            while True:
                data = await reader.read(2**20)
                if not data:
                    return
                if first:
                    ttft += time.perf_counter() - t0
                    first = False
                chunks += data.count(b'"choices":[{')
                tail = (tail + data)[-8:]
                if tail.endswith(b"0\r\n\r\n"):
                    done += 1
                    break
        writer.close()

    await asyncio.gather(*(conn() for _ in range(conc)))
    return done, chunks, ttft / max(1, done)


def measure_capacity(
    emu: Emulator,
    *,
    concurrency: int,
    requests: int,
    osl: int,
    cores: list[int] | None,
    load_procs: int = 1,
) -> Capacity:
    """The emulator alone under a raw client that parses nothing."""
    e0, t0 = emu.cpu_seconds(), time.perf_counter()
    if emu.binary is not None:
        cmd = [
            str(emu.binary),
            "load",
            "--port",
            str(emu.port),
            "--concurrency",
            str(concurrency),
            "--requests",
            str(requests),
            "--osl",
            str(osl),
            "--procs",
            str(load_procs),
        ]
        r = subprocess.run(
            _pinned(cmd, cores), capture_output=True, text=True, timeout=600, check=False
        )
        if r.returncode != 0:
            raise SystemExit(f"emu load failed ({r.returncode}): {r.stderr[-300:]}")
        done_s, chunks_s, dur_s, ttft_s = r.stdout.split()
        done, chunks, dur, ttft = int(done_s), int(chunks_s), float(dur_s), float(ttft_s)
        client = f"emu.c load x{load_procs}"
    else:
        done, chunks, ttft = asyncio.run(_py_load(emu.port, concurrency, requests, osl))
        dur = time.perf_counter() - t0
        client = "python raw"
    wall = time.perf_counter() - t0
    busy = (emu.cpu_seconds() - e0) / wall
    rate = chunks / dur
    per_busy = rate / busy * emu.procs if busy > 0 else float("inf")
    return Capacity(client, concurrency, rate, done / dur, ttft * 1000, busy, per_busy)
