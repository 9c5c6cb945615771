"""The raw client's CPU per read, one token per read, without a server or an event loop.

    .venv/bin/python bench/read_path.py [--streams 500] [--tokens 64] [--rounds 5]
        [--old-src DIR] [--per-read 1] [--whole]

Why: at concurrency 1000 on one core the client runs out of CPU and reads late (issue 23,
bench/NOTES.md *Timing error*); what decides where that happens is the CPU each read costs.
Timings on a shared machine move with its load; CPU time per read moves much less. This bench
opens --streams keep-alive TCP connections over loopback, writes one SSE token message per
connection (one HTTP chunk each, as emu.c writes them), then reads them as the client does: by
the pool's drain where the C path built (`Pool._drain`: one epoll set, each common read in C,
the rest handed to Python), else by each connection's reader (`Conn._readable`: recvmsg with the
kernel receive timestamp, chunked decoding, the SSE side); an older proctor without the drain is
read by its connections' readers. It counts the CPU time of those calls alone (the writes are
outside it). Each stream ends as emu.c ends one (usage message, [DONE], the last chunk), so the
work done when a response ends is counted too. --old-src DIR: the `src` of an older proctor
(`git archive main src | tar -x -C build/old`), measured in turns with this checkout's, each in
a process of its own. Prints microseconds of CPU per read, median of --rounds, and the ratio;
and, since the streams run in step (every stream's read of one token is one round, as in a
closed loop started at once), the CPU of the costliest round beside the mean: work saved per
read but done in lumps shows there (parsing each stream whole at its end put ~50 ms into one
round on the GPU host, bench/NOTES.md), and a round over one inter-token gap means the loop
reads late. Every stream's records are checked to hold all its tokens.
--per-read K: K token chunks in each read (what a loop one or more gaps late reads: tokens the
kernel merged), --tokens rounded down to a multiple of K; the CPU is then per token too.
--whole: each response in one read, head, tokens and end (what a zero-ITL server such as
bench/loadgen_rate.py's emulator sends, and a loop reads).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOKEN = (
    b'data: {"id":"emu","object":"text_completion","model":"emulator","choices":[{"index":0,'
    b'"text":" tok","logprobs":null,"finish_reason":null}]}\n\n'
)
USAGE = (
    b'data: {"id":"emu","object":"text_completion","model":"emulator","choices":[],'
    b'"usage":{"prompt_tokens":32,"completion_tokens":%d,"total_tokens":%d}}\n\n'
)
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: keep-alive\r\n\r\n"
)


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def child(streams: int, tokens: int, per_read: int = 1, whole: bool = False) -> dict[str, float]:
    """In a process whose PYTHONPATH picks the proctor to measure: CPU seconds per read."""
    import asyncio

    from proctor.workloads.loadgen import rxtime
    from proctor.workloads.loadgen.config import BenchConfig
    from proctor.workloads.loadgen.fasthttp import Conn, Pool, _Exchange
    from proctor.workloads.loadgen.records import RequestRecord
    from proctor.workloads.loadgen.sse import StreamState

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    lsock = socket.create_server(("127.0.0.1", 0), backlog=streams + 8)
    port = lsock.getsockname()[1]
    cfg = BenchConfig(base_url=f"http://127.0.0.1:{port}", model="m")
    pool = Pool(cfg)
    pool.clock = rxtime.ReadClock()
    pool.clock.start()
    # Where the pool reads its connections by a drain (one epoll set, the common read in C),
    # a round is read as the loop reads it: drain calls until every stream's read is done.
    drained = hasattr(pool, "open_drain") and pool.fast is not None
    if drained:
        pool.open_drain(loop)
    conns, servers = [], []
    for _ in range(streams):
        c = socket.create_connection(("127.0.0.1", port))
        c.setblocking(False)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rxtime.enable(c)
        s, _ = lsock.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        servers.append(s)
        conns.append(Conn(pool, c, loop))
    token = chunk(TOKEN)
    last = chunk(USAGE % (tokens, tokens + 32)) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    reads = 0
    cpu = 0.0
    rounds: list[float] = []  # CPU of each round (every stream's read of one token)
    records = []
    pt = time.process_time
    for wave in range(2):  # two requests per connection (keep-alive reuse)
        for i, conn in enumerate(conns):
            # each request its own index, as in a bench
            rec = RequestRecord(index=wave * streams + i, prompt_len=32, expected_output_len=tokens)
            st = time.perf_counter()
            rec.start_time = st
            conn.ex = _Exchange(rec, StreamState(rec, False, st), loop.create_future())
            records.append(rec)
        steps = range(0, tokens + 1, per_read)
        sends = [token * tokens + last] if whole else [token * per_read for _ in steps[:-1]]
        for k, data in enumerate(sends if whole else [*sends, last]):
            for s in servers:
                s.sendall(HEAD + data if k == 0 else data)
            if drained:  # every segment in before the round starts, as one-by-one reads find
                time.sleep(0.002)
            t0 = pt()
            if drained:
                before = pool.clock.reads
                for _ in range(streams):  # each call reads one ready connection at least
                    if pool.clock.reads - before >= streams:
                        break
                    pool._drain()
            else:
                for conn in conns:
                    conn._readable()
            rounds.append(pt() - t0)
            cpu += rounds[-1]
            reads += streams
    bad = [r for r in records if not r.success and r.reason]
    ok = [r for r in records if r.chunks == tokens and len(r.itl) == tokens - 1]
    for conn in conns:
        conn._abort()
    for s in servers:
        s.close()
    pool.close()
    return {
        "us_per_read": cpu / reads * 1e6,
        "us_per_token": cpu / (2 * streams * tokens) * 1e6,
        "round_mean_ms": cpu / len(rounds) * 1e3,
        "round_max_ms": max(rounds) * 1e3,
        "reads": reads,
        "ok": len(ok),
        "bad": len(bad),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--old-src", type=Path)
    ap.add_argument("--per-read", type=int, default=1, help="token chunks in each read")
    ap.add_argument("--whole", action="store_true", help="each response in one read")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.tokens -= a.tokens % a.per_read
    if a.child:
        print(json.dumps(child(a.streams, a.tokens, a.per_read, a.whole)))
        return
    codes = ([("old", a.old_src.resolve())] if a.old_src else []) + [("new", ROOT / "src")]
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    got: dict[str, list[float]] = {label: [] for label, _ in codes}
    worst: dict[str, list[float]] = {label: [] for label, _ in codes}
    per_token: dict[str, list[float]] = {label: [] for label, _ in codes}
    for r in range(a.rounds):
        for label, src in codes:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), *rest])}
            cmd = [sys.executable, __file__, "--child", "--streams", str(a.streams)]
            out = subprocess.run(
                [*cmd, "--tokens", str(a.tokens), "--per-read", str(a.per_read)]
                + (["--whole"] if a.whole else []),
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            d = json.loads(out.stdout)
            if d["ok"] != 2 * a.streams or d["bad"]:
                raise SystemExit(f"{label}: records not as written: {d}")
            got[label].append(d["us_per_read"])
            per_token[label].append(d["us_per_token"])
            worst[label].append(d["round_max_ms"])
            print(
                f"round {r + 1} {label}: {d['us_per_read']:.2f} us of CPU per read; a round of "
                f"reads (one per stream) {d['round_mean_ms']:.2f} ms on average, "
                f"{d['round_max_ms']:.2f} at most",
                flush=True,
            )
    med = {label: statistics.median(v) for label, v in got.items()}
    print(
        f"\n{a.streams} streams x {a.tokens} tokens, "
        f"{'a response' if a.whole else f'{a.per_read} token(s)'} per read, "
        f"median of {a.rounds}:"
    )
    for label, v in med.items():
        print(
            f"  {label}: {v:.2f} us/read, {statistics.median(per_token[label]):.2f} us/token, "
            f"costliest round {statistics.median(worst[label]):.2f} ms"
        )
    if "old" in med:
        print(f"  new/old CPU per read: {med['new'] / med['old']:.2f}")


if __name__ == "__main__":
    main()
