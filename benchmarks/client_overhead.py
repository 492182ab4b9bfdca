"""What does perfguard's HTTP client add to each token's time, against a bare reader?

A served cell's token time is when the token's server-sent event reached perfguard's
client (``perfguard.serving.client.OpenAIClient``: aiohttp, a loop thread of its own,
a kept-alive connection) plus the parse of that one line. This measures what that adds,
so that a slow client is never mistaken for a slow server.

**Part 1, synthetic server**: a server process (asyncio, raw sockets) streams
``--tokens`` events per request, ``--gap-ms`` apart, each carrying the monotonic clock
(``perf_counter_ns``, one clock for every process of the machine) read just before it
is written. Each client records when each token arrived (perfguard: its ``stamp``; the
bare reader: its clock right after ``recv`` returned the bytes) and the delay is arrival
minus send: the kernel's loopback, the event loop, the parse. The bare reader (one
blocking socket, no HTTP library, the text field cut out by hand) is the floor any
Python client pays; perfguard's delay minus the bare one is the client's own cost per
token. Requests alternate between the clients (ABBA).

**Part 2, the real engine**: the tiny example model behind llama.cpp's server; ITL P50
per request as perfguard's client and the bare reader see it, alternating request by
request; their ratio is the client's share of a real (very short, ~0.3 ms) ITL.

Also reports the connections perfguard's client opened for all its requests (1: kept
alive). The garbage collector is off, as in perfguard's timed loops. This is a report,
not a test: it always exits 0.

    python benchmarks/client_overhead.py --requests 200 --tokens 64
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Runnable from a checkout without installing.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfguard.serving.client import OpenAIClient
from perfguard.serving.process import ServerProcess, free_port, server_env

_SERVER = """
import asyncio, sys, time
TOKENS, GAP = int(sys.argv[2]), float(sys.argv[3]) / 1000

async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\\r\\n\\r\\n")
            length = 0
            for line in head.split(b"\\r\\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n"
                         b"Transfer-Encoding: chunked\\r\\n\\r\\n")
            for _ in range(TOKENS):
                deadline = time.perf_counter() + GAP
                while time.perf_counter() < deadline:
                    pass
                event = b'data: {"choices":[{"text":"%d"}]}\\n\\n' % time.perf_counter_ns()
                writer.write(b"%x\\r\\n%s\\r\\n" % (len(event), event))
                await writer.drain()
            done = b"data: [DONE]\\n\\n"
            writer.write(b"%x\\r\\n%s\\r\\n0\\r\\n\\r\\n" % (len(done), done))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


class BareReader:
    """One blocking socket, HTTP/1.1 by hand: the floor of a Python SSE client."""

    def __init__(self, port: int, path: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.path = path

    def stream(self, body: dict[str, object]) -> list[tuple[int, bytes]]:
        """(arrival ns, event's JSON) per token event."""
        data = json.dumps(body).encode()
        self.sock.sendall(
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (self.path.encode(), len(data), data)
        )
        clock = time.perf_counter_ns
        events: list[tuple[int, bytes]] = []
        buffer = b""
        while True:
            chunk = self.sock.recv(65536)
            now = clock()
            if not chunk:
                raise ConnectionError("closed")
            buffer += chunk
            while True:
                start = buffer.find(b"data: ")
                end = buffer.find(b"\n\n", start) if start >= 0 else -1
                if end < 0:
                    break
                event = buffer[start + 6 : end]
                buffer = buffer[end + 2 :]
                if event == b"[DONE]":
                    buffer = b""
                    return events
                events.append((now, event))


def _stamper(stamps: list[int]) -> Callable[[], None]:
    clock = time.perf_counter_ns

    def stamp() -> None:
        stamps.append(clock())

    return stamp


def _text(event: bytes) -> str:
    choice = json.loads(event)["choices"][0]
    return str(choice.get("text", (choice.get("delta") or {}).get("content", "")))


def synthetic(requests: int, tokens: int, gap_ms: float) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "sse.py"
        script.write_text(_SERVER)
        server = subprocess.Popen(
            [sys.executable, str(script), str(port), str(tokens), str(gap_ms)]
        )
        try:
            time.sleep(1.0)
            client = OpenAIClient(f"http://127.0.0.1:{port}", name="the benchmark's")
            bare = BareReader(port, "/v1/completions")
            ours: list[float] = []
            floor: list[float] = []
            for i in range(requests):
                order = (0, 1) if i % 4 in (0, 3) else (1, 0)
                for side in order:
                    if side == 0:
                        stamps: list[int] = []
                        reply = client.stream("/v1/completions", {}, _stamper(stamps))
                        pairs = zip(stamps, reply.text, strict=True)
                        ours += [(t - int(s)) / 1e3 for t, s in pairs]
                    else:
                        events = bare.stream({})
                        floor += [(t - int(_text(e))) / 1e3 for t, e in events]
            connections = client.connections
            client.close()
        finally:
            server.kill()
            server.wait()

    def cut(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100)[int(q) - 1]

    print(f"synthetic SSE server: {requests} requests x {tokens} tokens, {gap_ms} ms apart")
    print("| client | delay P50 us | delay P99 us |")
    print("|---|---|---|")
    print(f"| bare socket reader | {cut(floor, 50):.1f} | {cut(floor, 99):.1f} |")
    print(f"| perfguard (aiohttp) | {cut(ours, 50):.1f} | {cut(ours, 99):.1f} |")
    print(
        f"perfguard's own cost per token: {cut(ours, 50) - cut(floor, 50):+.1f} us at P50, "
        f"{cut(ours, 99) - cut(floor, 99):+.1f} us at P99; connections opened: {connections}"
    )


def real_engine(requests: int, tokens: int) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        command = [
            sys.executable, "-m", "perfguard_examples.tinyserver", "--", "--port", str(port),
            "--n_threads", "1", "--n_ctx", "512",
        ]  # fmt: skip
        proc = ServerProcess(
            command, cwd=Path(folder), env=server_env({}), log=Path(folder) / "s.log", name="tiny"
        )
        proc.start()
        try:
            proc.wait_ready(f"http://127.0.0.1:{port}/v1/models", 60)
            client = OpenAIClient(f"http://127.0.0.1:{port}", name="the benchmark's")
            model = client.get("/v1/models")[2]["data"][0]["id"]
            body = {
                "model": model, "prompt": "the quick brown fox " * 8, "max_tokens": tokens,
                "min_tokens": tokens, "stream": True,
            }  # fmt: skip
            bare = BareReader(port, "/v1/completions")
            itl: dict[str, list[float]] = {"perfguard": [], "bare": []}
            for i in range(requests):
                order = ("perfguard", "bare") if i % 4 in (0, 3) else ("bare", "perfguard")
                for side in order:
                    if side == "perfguard":
                        stamps = []
                        client.stream("/v1/completions", body, _stamper(stamps))
                    else:
                        stamps = [
                            t
                            for t, e in bare.stream(body)
                            if json.loads(e)["choices"][0]["finish_reason"] is None
                        ]
                    gaps = [(b - a) / 1e3 for a, b in itertools.pairwise(stamps)]
                    itl[side].append(statistics.median(gaps))
            client.close()
        finally:
            proc.stop()
    ours, floor = statistics.median(itl["perfguard"]), statistics.median(itl["bare"])
    print(f"\nllama.cpp's server, tiny model: {requests} requests x {tokens} tokens, ABBA")
    print(
        f"ITL P50 (median over requests): perfguard {ours:.1f} us, bare reader {floor:.1f} us,"
        f" ratio {ours / floor:.4f}"
    )


def main() -> None:
    # The garbage collector is off while perfguard times (perfguard.measure.timing).
    gc.disable()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    args = parser.parse_args()
    synthetic(args.requests, args.tokens, args.gap_ms)
    real_engine(args.requests, args.tokens)


if __name__ == "__main__":
    main()
