"""Capacity of proctor's load generator against a token-streaming emulator on loopback.

Anchor: the emulator alone, driven by a raw minimal client (asyncio protocol, counts
`data:` messages, parses nothing). Then proctor's client (`python -m proctor.workloads.loadgen`)
at concurrency 64, 256 and 1024, and with --workers 1/2. Reported per point: requests/s,
chunks/s (one token per chunk, so = output tok/s), the TTFT the client adds over the
emulator's configured TTFT, the emulator's CPU use (if it nears 100% of a core, the emulator
is the bottleneck, not the client), and ratios against the raw client.

    .venv/bin/python bench/loadgen_capacity.py [--quick] [--ablate]
        [--vllm-python PY --tokenizer DIR]
        [--extra-client 'CMD {base_url} {concurrency} {num_prompts} {isl} {osl} {model}']

vLLM's own client (`vllm bench serve`, through tests/infra/vllm_bench_shim.py) runs on the same
emulator at every concurrency when --vllm-python is given, or found in the test-engine install
(~/.cache/proctor-test/engines.json); the table then has a "vs vllm" column (proctor's chunks/s
over vLLM's). --extra-client runs any other client, read through its printed block.
--ablate adds proctor rows without uvloop, and without uvloop and orjson (same run).
With 2+ cores the emulator is pinned to core 0 and the clients to the other cores, so a client
that is "on one core" really is (--no-pin turns this off).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
MODEL = "emulator"

# ----------------------------------------------------------------------------- emulator


class _Stream:
    __slots__ = ("left", "n", "transport", "usage_in")

    def __init__(self, transport: asyncio.Transport, n: int, usage_in: int) -> None:
        self.transport, self.left, self.n, self.usage_in = transport, n, n, usage_in


_CHUNK = b'data: {"id":"e","object":"text_completion","model":"emulator","choices":[{"index":0,"text":" tok","finish_reason":null}]}\n\n'  # noqa: E501
_CHUNK_HTTP = b"%x\r\n%s\r\n" % (len(_CHUNK), _CHUNK)
_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
         b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Emulator:
    """One timer for every stream: each tick writes the next chunk to every active stream."""

    def __init__(self, ttft: float, tick: float) -> None:
        self.ttft, self.tick = ttft, tick
        self.active: list[_Stream] = []
        self.pending: list[tuple[float, _Stream]] = []

    async def ticker(self) -> None:
        loop = asyncio.get_running_loop()
        nxt = loop.time()
        while True:
            nxt += self.tick
            await asyncio.sleep(max(0.0, nxt - loop.time()))
            now = loop.time()
            if self.pending:
                ready = [s for t, s in self.pending if t <= now]
                if ready:
                    self.pending = [(t, s) for t, s in self.pending if t > now]
                    self.active.extend(ready)
            still: list[_Stream] = []
            for s in self.active:
                if s.transport.is_closing():
                    continue
                s.transport.write(_CHUNK_HTTP)
                s.left -= 1
                if s.left > 0:
                    still.append(s)
                else:
                    usage = ('data: {"id":"e","object":"text_completion","model":"emulator",'
                             f'"choices":[],"usage":{{"prompt_tokens":{s.usage_in},'
                             f'"completion_tokens":{s.n},"total_tokens":{s.usage_in + s.n}}}}}'
                             '\n\n')
                    s.transport.write(_chunked(usage.encode()) + _chunked(b"data: [DONE]\n\n")
                                      + b"0\r\n\r\n")
            self.active = still

    def protocol(self) -> asyncio.Protocol:
        emu = self

        class P(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                assert isinstance(transport, asyncio.Transport)
                self.t = transport
                self.buf = b""

            def data_received(self, data: bytes) -> None:
                self.buf += data
                while True:
                    end = self.buf.find(b"\r\n\r\n")
                    if end < 0:
                        return
                    head = self.buf[:end].decode("latin-1")
                    m = re.search(r"(?i)content-length:\s*(\d+)", head)
                    n = int(m.group(1)) if m else 0
                    if len(self.buf) < end + 4 + n:
                        return
                    body = self.buf[end + 4:end + 4 + n]
                    self.buf = self.buf[end + 4 + n:]
                    self.handle(head.split(" ", 2), body)

            def handle(self, line: list[str], body: bytes) -> None:
                path = line[1] if len(line) > 1 else "/"
                if path.startswith("/v1/models") or path == "/health":
                    out = json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode()
                    self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(out), out))
                    return
                if not path.startswith("/v1/"):
                    self.t.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    return
                mt = re.search(rb'"max(?:_completion)?_tokens":\s*(\d+)', body)
                n = int(mt.group(1)) if mt else 16
                words = body.count(b" ") + 1
                self.t.write(_HEAD)
                emu.pending.append((asyncio.get_running_loop().time() + emu.ttft,
                                    _Stream(self.t, n, words)))

        return P()


async def _serve(port: int, ttft: float, tick: float) -> None:
    emu = Emulator(ttft, tick)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(emu.protocol, "127.0.0.1", port, backlog=8192)
    print("ready", flush=True)
    async with server:
        await emu.ticker()


# ----------------------------------------------------------------------------- raw client


async def _raw_client(port: int, concurrency: int, n: int, osl: int) -> tuple[float, int, float]:
    """Back-to-back requests on `concurrency` keep-alive connections; counts messages only."""
    body = json.dumps({"model": MODEL, "prompt": "x " * 32, "max_tokens": osl,
                       "stream": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    left = n
    chunks = 0
    ttfts: list[float] = []

    async def conn() -> None:
        nonlocal left, chunks
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**22)
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            writer.write(req)
            first = True
            tail = b""
            while True:
                data = await reader.read(2**20)
                if not data:
                    return
                if first and b"data: {" in data:
                    ttfts.append(time.perf_counter() - t0)
                    first = False
                chunks += data.count(b'"choices":[{')
                tail = (tail + data)[-16:]
                if tail.endswith(b"0\r\n\r\n"):
                    break
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(conn() for _ in range(concurrency)))
    dur = time.perf_counter() - t0
    return dur, chunks, sum(ttfts) / max(1, len(ttfts))


# ----------------------------------------------------------------------------- harness


@dataclass
class Point:
    client: str
    concurrency: int
    workers: int
    req_s: float
    chunks_s: float
    ttft_added_ms: float
    emu_cpu: float  # fraction of one core
    client_cpu: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def _children_cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.children_user + t.children_system)


def run_raw(port: int, emu: psutil.Process, conc: int, n: int, osl: int, ttft: float) -> Point:
    c0, e0 = time.process_time(), _cpu(emu)
    dur, chunks, mean_ttft = asyncio.run(_raw_client(port, conc, n, osl))
    return Point("raw", conc, 1, n / dur, chunks / dur, (mean_ttft - ttft) * 1000,
                 (_cpu(emu) - e0) / dur, (time.process_time() - c0) / dur)


# Ablations of the client's speed-ups, same run: (label suffix, extra environment).
ABLATIONS = {
    "asyncio": {"PROCTOR_EVENT_LOOP": "asyncio"},  # standard loop instead of uvloop
    "stdjson": {"PROCTOR_EVENT_LOOP": "asyncio", "_NO_ORJSON": "1"},  # ... and json, not orjson
}


def _ablation_env(name: str, tmp: str) -> dict[str, str]:
    env = {**os.environ, **ABLATIONS[name]}
    if env.pop("_NO_ORJSON", None):  # an orjson module that fails to import hides the real one
        Path(tmp, "orjson.py").write_text("raise ImportError('hidden by the bench')\n")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tmp, env.get("PYTHONPATH")) if p)
    return env


def run_proctor(port: int, emu: psutil.Process, conc: int, n: int, osl: int, ttft: float,
                workers: int, pin: bool = False, ablation: str | None = None) -> Point:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "proctor.workloads.loadgen", "--port", str(port),
               "--output-dir", out, "--model", MODEL, "--tokenizer-mode", "approx",
               "--isl", "32", "--osl", str(osl), "--range-ratio", "0", "--concurrency", str(conc),
               "--num-prompts", str(n), "--num-warmups", str(min(conc, 64)), "--no-progress",
               "--workers", str(workers)]
        me = psutil.Process()
        c0, e0 = _children_cpu(me), _cpu(emu)
        t0 = time.perf_counter()
        env = _ablation_env(ablation, out) if ablation else None
        r = subprocess.run(_pinned(cmd, pin), capture_output=True, text=True, cwd=ROOT,
                           timeout=300, env=env)  # fmt: skip
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"proctor client failed ({r.returncode}): {r.stderr[-500:]}")
        doc = json.loads((Path(out) / "metrics.json").read_text())
    m = doc["metrics"]
    label = f"proctor w{workers}" + (f" {ablation}" if ablation else "")
    return Point(label, conc, workers, m["request_throughput"],
                 m["output_throughput"], m["mean_ttft_ms"] - ttft * 1000,
                 (_cpu(emu) - e0) / wall, (_children_cpu(me) - c0) / wall)


def _client_cores() -> list[int] | None:
    cores = sorted(os.sched_getaffinity(0))
    return cores[1:] if len(cores) >= 2 else None


def _pinned(cmd: list[str], pin: bool) -> list[str]:
    cores = _client_cores() if pin else None
    if cores is None or shutil.which("taskset") is None:
        return cmd
    return ["taskset", "-c", ",".join(map(str, cores)), *cmd]


def vllm_template(python: str, tokenizer: str) -> str:
    """`vllm bench serve` on the emulator: the random dataset with fixed lengths, no warm-up."""
    shim = ROOT / "tests" / "infra" / "vllm_bench_shim.py"
    return (f"{shlex.quote(python)} {shlex.quote(str(shim))} bench serve --backend vllm "
            "--base-url {base_url} --model {model} --tokenizer " + shlex.quote(tokenizer) +
            " --dataset-name random --random-input-len {isl} --random-output-len {osl} "
            "--random-range-ratio 0 --num-prompts {num_prompts} --max-concurrency {concurrency} "
            "--ignore-eos --num-warmups 0 --disable-tqdm --seed 0 "
            "--percentile-metrics ttft,tpot,itl,e2el")  # fmt: skip


def find_vllm() -> tuple[str, str] | None:
    """(python, tokenizer dir) of the test-engine install, if there is one."""
    cache = Path(os.environ.get("PROCTOR_TEST_CACHE", Path.home() / ".cache" / "proctor-test"))
    try:
        data = json.loads((cache / "engines.json").read_text())
        python, model = data["vllm"]["python"], data["model_dir"]
    except (OSError, ValueError, KeyError):
        return None
    return (python, model) if Path(python).exists() and Path(model).is_dir() else None


def run_extra(template: str, base_url: str, emu: psutil.Process, conc: int, n: int, osl: int,
              ttft: float, label: str = "extra", pin: bool = False) -> Point:
    sys.path.insert(0, str(ROOT / "src"))
    from proctor.results import parse_string

    cmd = template.format(base_url=base_url, concurrency=conc, num_prompts=n, isl=32, osl=osl,
                          model=MODEL)
    me = psutil.Process()
    c0, e0 = _children_cpu(me), _cpu(emu)
    t0 = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    r = subprocess.run(_pinned(shlex.split(cmd), pin), capture_output=True, text=True,
                       timeout=600, env=env)  # fmt: skip
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{label} client failed ({r.returncode}): {(r.stdout + r.stderr)[-800:]}")
    v = parse_string(r.stdout + "\n" + r.stderr).values()
    # Its CPU share is over the whole process (imports included), so read it as an upper bound.
    return Point(label, conc, 1, v["request_throughput"], v["output_throughput"],
                 v.get("mean_ttft_ms", float("nan")) - ttft * 1000, (_cpu(emu) - e0) / wall,
                 (_children_cpu(me) - c0) / wall)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--ttft", type=float, default=0.020, help="emulator TTFT (s)")
    ap.add_argument("--tick", type=float, default=0.005, help="emulator inter-chunk time (s)")
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="fewer requests per point")
    ap.add_argument("--extra-client", help="another client's command template")
    ap.add_argument("--vllm-python", help="python of a vLLM install (default: the test engines')")
    ap.add_argument("--tokenizer", help="tokenizer dir for vLLM's client (default: test model)")
    ap.add_argument("--no-vllm", action="store_true", help="skip vLLM's client")
    ap.add_argument("--no-pin", action="store_true", help="do not pin emulator and clients")
    ap.add_argument("--workers", default="2", help="comma-separated --workers to try beyond 1")
    ap.add_argument("--ablate", action="store_true",
                    help="also run proctor w1 without uvloop, and without uvloop and orjson")
    a = ap.parse_args()
    if a.serve:
        asyncio.run(_serve(a.serve, a.ttft, a.tick))
        return 0
    pin = not a.no_pin and _client_cores() is not None
    vllm: str | None = None
    if not a.no_vllm:
        found = (a.vllm_python, a.tokenizer) if a.vllm_python and a.tokenizer else find_vllm()
        vllm = vllm_template(*found) if found else None

    port = free_port()
    emu_cmd = [sys.executable, __file__, "--serve", str(port), "--ttft", str(a.ttft), "--tick",
               str(a.tick)]  # fmt: skip
    if pin and shutil.which("taskset"):
        emu_cmd = ["taskset", "-c", str(sorted(os.sched_getaffinity(0))[0]), *emu_cmd]
    emu_proc = subprocess.Popen(emu_cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    started = time.perf_counter()
    try:
        assert emu_proc.stdout is not None
        if emu_proc.stdout.readline().strip() != "ready":
            raise SystemExit("emulator did not start")
        emu = psutil.Process(emu_proc.pid)
        if emu.name() == "taskset":  # exec'd: the pid is the emulator's by now
            emu = psutil.Process(emu_proc.pid)
        scale = 1 if a.quick else 4
        points: list[Point] = []
        plan = [(64, 64 * 4 * scale), (256, 256 * 2 * scale), (1024, 1024 * scale)]
        where = (f"emulator on core {sorted(os.sched_getaffinity(0))[0]}, clients on "
                 f"{_client_cores()}" if pin else "unpinned")  # fmt: skip
        print(f"emulator: TTFT {a.ttft * 1000:.0f} ms, one chunk per {a.tick * 1000:.0f} ms, "
              f"OSL {a.osl}; {os.cpu_count()} cores; {where}", flush=True)
        base_url = f"http://127.0.0.1:{port}"
        for conc, n in plan:
            points.append(run_raw(port, emu, conc, n, a.osl, a.ttft))
            print(f"  raw        c={conc}: {points[-1].chunks_s:.0f} chunks/s", flush=True)
            points.append(run_proctor(port, emu, conc, n, a.osl, a.ttft, 1, pin))
            print(f"  proctor w1 c={conc}: {points[-1].chunks_s:.0f} chunks/s", flush=True)
            for name in ABLATIONS if a.ablate else ():
                points.append(run_proctor(port, emu, conc, n, a.osl, a.ttft, 1, pin, name))
                print(f"  {points[-1].client} c={conc}: {points[-1].chunks_s:.0f} chunks/s",
                      flush=True)
            if vllm:
                points.append(run_extra(vllm, base_url, emu, conc, n, a.osl, a.ttft, "vllm", pin))
                print(f"  vllm       c={conc}: {points[-1].chunks_s:.0f} chunks/s", flush=True)
            if a.extra_client:
                points.append(run_extra(a.extra_client, base_url, emu, conc, n, a.osl, a.ttft))
        for w in [int(x) for x in a.workers.split(",") if x]:
            points.append(run_proctor(port, emu, 256, 256 * 2 * scale, a.osl, a.ttft, w, pin))
            points.append(run_proctor(port, emu, 1024, 1024 * scale, a.osl, a.ttft, w, pin))
    finally:
        os.killpg(emu_proc.pid, 9)
        emu_proc.wait()

    # Ideal: every stream gets a chunk per tick; a request lasts TTFT + OSL ticks.
    raw = {p.concurrency: p for p in points if p.client == "raw"}
    w1 = {p.concurrency: p for p in points if p.client == "proctor w1"}
    vl = {p.concurrency: p for p in points if p.client == "vllm"}
    print()
    print(f"{'client':<18} {'conc':>5} {'req/s':>8} {'chunks/s':>9} {'TTFT+ms':>8} "
          f"{'emuCPU':>7} {'cliCPU':>7} {'vs raw':>7} {'vs ideal':>8} {'vs w1':>6} {'vs vllm':>7}")
    for p in points:
        ideal = p.concurrency * a.osl / (a.ttft + a.osl * a.tick)
        vs_raw = p.chunks_s / raw[p.concurrency].chunks_s
        vs_w1 = p.chunks_s / w1[p.concurrency].chunks_s if p.client.startswith("proctor") else 1.0
        ref = vl.get(p.concurrency)
        vs_vllm = f"{p.chunks_s / ref.chunks_s:>7.2f}" if ref and p.client != "raw" else f"{'-':>7}"
        print(f"{p.client:<18} {p.concurrency:>5} {p.req_s:>8.1f} {p.chunks_s:>9.0f} "
              f"{p.ttft_added_ms:>8.1f} {p.emu_cpu:>6.0%} {p.client_cpu:>6.0%} {vs_raw:>7.2f} "
              f"{p.chunks_s / ideal:>8.2f} {vs_w1:>6.2f} {vs_vllm}")
    print("\nTTFT+ms: mean TTFT minus the emulator's configured TTFT. emuCPU near 100% means the"
          "\nemulator (one core) limits that point. vs ideal: against every stream getting a"
          "\nchunk per tick. vs vllm: chunks/s over vLLM's client at the same concurrency (vLLM's"
          "\ncliCPU includes its start-up imports)."
          f"\ntook {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
