"""A raw-client connection with no socket and no running loop, for tests that hand it reads
directly (Conn._handle, _whole_chunks, data_received) and look at what it recorded."""

from __future__ import annotations

from proctor.workloads.loadgen import fasthttp


class _Loop:
    """What a Conn asks of its event loop once it is open: nothing that runs."""

    def remove_reader(self, fd: int) -> None: ...
    def remove_writer(self, fd: int) -> None: ...


class _Sock:
    def close(self) -> None: ...


class _Pool:
    take = None  # every read in Python, the tokens after a head too
    ep = None  # not read by a drain

    def __init__(self) -> None:
        self.conns: set[fasthttp.Conn] = set()
        self.idle: list[fasthttp.Conn] = []
        self.by_fd: dict[int, fasthttp.Conn] = {}


def bare_conn() -> fasthttp.Conn:
    conn = fasthttp.Conn.__new__(fasthttp.Conn)
    conn.pool, conn.sock, conn.loop = _Pool(), _Sock(), _Loop()  # type: ignore[assignment]
    conn.fd, conn.closed, conn.flight, conn.pending = -1, False, None, b""
    conn._reset()
    return conn
