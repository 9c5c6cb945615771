"""The kernel's part of one token's read: what the client's core pays per recvmsg over loopback.

    .venv/bin/python bench/ack_cost.py [--reads 100000] [--rounds 3]

Why: at concurrency 1000 on one core the client runs out of CPU (issue 23, bench/NOTES.md
*Where a token's CPU goes*), and most of a read's CPU is the kernel's, not Python's. A read that
empties a socket after a small pushed segment makes Linux send an ACK at once (tcp_cleanup_rbuf);
over loopback the ACK is also received, by the server's socket, in the same softirq on the
client's core. This bench writes one token-sized segment (TCP_NODELAY, as uvicorn and emu.c),
then reads it with recvmsg asking for the receive timestamp (as the client does), and prints the
time per read (perf_counter: what the event loop waits for; run it on a quiet core, e.g. under
`taskset -c 1`) and the CPU time the process was charged (process_time: less, where the kernel
counts softirq time apart): with Linux's default (an ACK per read), and
with TCP_QUICKACK turned off once at the start (the connection in "ping-pong" mode: an ACK every
second small segment). The difference, times two, is what one ACK costs the reader's core.
Each mode gets a fresh connection per round, interleaved, medians printed.

Why proctor does not turn ACKs down: against a server that leaves Nagle on (no TCP_NODELAY), a
held-back ACK holds back that server's next token until the delayed-ACK timer (40 ms): the
client would add to the ITL the very error it exists to avoid.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

SO_TIMESTAMPNS = 35  # as proctor.workloads.loadgen.rxtime
TOKEN = b"x" * 170  # one emu.c token chunk, about


def one_round(lsock: socket.socket, reads: int, ping_pong: bool) -> tuple[float, float]:
    """(microseconds per read, CPU microseconds per read)."""
    client = socket.create_connection(lsock.getsockname())
    server, _ = lsock.accept()
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    if ping_pong:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
    wall = cpu = 0.0
    pt, pc = time.process_time, time.perf_counter
    try:
        for _ in range(reads):
            server.send(TOKEN)
            c0, t0 = pt(), pc()
            client.recvmsg(65536, 64)
            t1, c1 = pc(), pt()
            wall += t1 - t0
            cpu += c1 - c0
    finally:
        client.close()
        server.close()
    return wall / reads * 1e6, cpu / reads * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reads", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    lsock = socket.create_server(("127.0.0.1", 0))
    got: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for ping_pong in (False, True):
            got[ping_pong].append(one_round(lsock, args.reads, ping_pong))
    print(f"recvmsg per read, median of {args.rounds} rounds of {args.reads} (us; time / CPU):")
    med = {k: [statistics.median(x[i] for x in v) for i in (0, 1)] for k, v in got.items()}
    for k, label in ((False, "an ACK per read (Linux's default)"), (True, "an ACK every 2nd read")):
        print(f"  {label:<36} {med[k][0]:6.2f} / {med[k][1]:6.2f}")
    ack = [2 * (med[False][i] - med[True][i]) for i in (0, 1)]
    print(f"  {'one ACK costs the reader':<36} {ack[0]:6.2f} / {ack[1]:6.2f}")


if __name__ == "__main__":
    main()
