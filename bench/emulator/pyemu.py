"""The Python fallback of emu.c: the same wire format, for hosts without a C compiler.

    python bench/emulator/pyemu.py --port P [--procs N] [--ttft-ms T] [--itl-ms I] [--model M]

N processes share the port through SO_REUSEPORT, each a raw asyncio server (uvloop when
installed). TTFT/ITL 0 writes a whole response at once; otherwise one timer per process emits
the next chunk of every due stream each tick of the ITL. Several times slower than emu.c.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import re
import socket
import sys
import time


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Wire:
    def __init__(self, model: str) -> None:
        self.model = model
        m = json.dumps(model)
        cmpl = (
            'data: {"id":"emu","object":"text_completion","model":' + m + ',"choices":'
            '[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]}\n\n'
        )
        chat = (
            'data: {"id":"emu","object":"chat.completion.chunk","model":' + m + ',"choices":'
            '[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n'
        )
        self.token = {False: _chunked(cmpl.encode()), True: _chunked(chat.encode())}
        self.head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
        )

    def tail(self, chat: bool, usage: bool, prompt: int, n: int) -> bytes:
        out = b""
        if usage:
            obj = "chat.completion.chunk" if chat else "text_completion"
            u = (
                f'data: {{"id":"emu","object":"{obj}","model":"{self.model}","choices":[],'
                f'"usage":{{"prompt_tokens":{prompt},"completion_tokens":{n},'
                f'"total_tokens":{prompt + n}}}}}\n\n'
            )
            out += _chunked(u.encode())
        return out + _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class _Stream:
    __slots__ = ("chat", "due", "left", "n", "prompt", "transport", "usage")

    def __init__(
        self, transport: asyncio.Transport, chat: bool, usage: bool, n: int, prompt: int, due: float
    ) -> None:
        self.transport, self.chat, self.usage = transport, chat, usage
        self.n = self.left = n
        self.prompt, self.due = prompt, due


_MAX = re.compile(rb'"max(?:_completion)?_tokens"\s*:\s*(\d+)')
_PROMPT = re.compile(rb'"(?:prompt|content)"\s*:\s*"((?:[^"\\]|\\.)*)"')


class Server:
    def __init__(self, ttft: float, itl: float, model: str) -> None:
        self.ttft, self.itl, self.wire = ttft, itl, Wire(model)
        self.streams: list[_Stream] = []

    async def ticker(self) -> None:
        tick = self.itl if self.itl > 0 else 0.001
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            still = []
            for s in self.streams:
                if s.transport.is_closing():
                    continue
                if s.due > now:
                    still.append(s)
                    continue
                s.transport.write(self.wire.token[s.chat])
                s.left -= 1
                s.due = now + self.itl
                if s.left > 0:
                    still.append(s)
                else:
                    s.transport.write(self.wire.tail(s.chat, s.usage, s.prompt, s.n))
            self.streams = still

    def protocol(self) -> asyncio.Protocol:
        srv = self

        class P(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.t: asyncio.Transport = transport  # type: ignore[assignment]
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
                    body = self.buf[end + 4 : end + 4 + n]
                    self.buf = self.buf[end + 4 + n :]
                    parts = head.split(" ", 2)
                    self.handle(parts[1] if len(parts) > 1 else "/", body)

            def handle(self, path: str, body: bytes) -> None:
                if path.startswith(("/v1/models", "/health")):
                    out = json.dumps(
                        {"object": "list", "data": [{"id": srv.wire.model, "object": "model"}]}
                    )
                    self.t.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(out), out.encode())
                    )
                    return
                chat = path.startswith("/v1/chat/completions")
                if not chat and not path.startswith("/v1/completions"):
                    self.t.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    return
                mt = _MAX.search(body)
                n = max(1, int(mt.group(1))) if mt else 16
                mp_ = _PROMPT.search(body)
                prompt = mp_.group(1).count(b" ") + 1 if mp_ else 1
                usage = b"include_usage" in body
                wire = srv.wire
                if srv.ttft <= 0 and srv.itl <= 0:
                    self.t.write(
                        wire.head + wire.token[chat] * n + wire.tail(chat, usage, prompt, n)
                    )
                    return
                self.t.write(wire.head)
                srv.streams.append(
                    _Stream(self.t, chat, usage, n, prompt, time.monotonic() + srv.ttft)
                )

        return P()


def listener(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(8192)
    s.setblocking(False)
    return s


async def _serve(sock: socket.socket, ttft: float, itl: float, model: str) -> None:
    srv = Server(ttft, itl, model)
    server = await asyncio.get_running_loop().create_server(srv.protocol, sock=sock)
    async with server:
        if ttft > 0 or itl > 0:
            await srv.ticker()
        else:
            await asyncio.Event().wait()


def _child(k: int, sock: socket.socket, ttft: float, itl: float, model: str) -> None:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > 1:
        os.sched_setaffinity(0, {cores[k % len(cores)]})
    run = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        run = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        run(_serve(sock, ttft, itl, model))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--model", default="emulator")
    a = ap.parse_args()
    socks = [listener(a.port) for _ in range(max(1, a.procs))]
    ctx = mp.get_context("fork")
    procs = [
        ctx.Process(
            target=_child, args=(k, s, a.ttft_ms / 1000, a.itl_ms / 1000, a.model), daemon=True
        )
        for k, s in enumerate(socks)
    ]
    for p in procs:
        p.start()
    print(f"ready {len(procs)}", flush=True)
    for p in procs:
        p.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
