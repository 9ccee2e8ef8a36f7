"""gzip on event streams (the sse server's `compression`): bytes on the wire against CPU and
memory per stream, at 1,000 streams.

In-process, through the real write path (`SseServer` and `SseStream`, each stream's own
`GzipWriter`), with requests that count what they are given instead of sockets: what is
measured is what ssekd adds per stream, not the kernel's share. The events are what a topic of
orders looks like (JSON objects of one shape, ids of the `${etag}` form), written the two ways a
stream sees them:

- `trickle`: one event per write, as a stream at the tail of a quiet topic gets them;
- `burst`: 50 events per write, as a catching-up stream or a busy topic's batch.

For each setting: the bytes sent over the bytes of events (`wire`), the CPU per stream and write
and per event (process time, all 1,000 streams written in turn with the same data as a tail
group is), and the memory a stream's compressor holds (tracemalloc, against zlib's formula).
`plain` is the same path without gzip. The `context: event` rows compress each event with no
memory of the ones before (a full flush after each, against the length oracle a shared window
is): beside the same setting with the default `context: stream`, what that costs.

    python -m bench.compression            # 200 writes per stream and shape
    python -m bench.compression --quick    # 40
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
import tracemalloc
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from bench.common import table, write_result
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.compression import Compression
from ssekd.bindings.sse.server import SseServer
from ssekd.event_ids import ProgressId
from ssekd.telemetry.events import EventLog

STREAMS = 1_000
#: (name, compression): plain, then gzip settings from the fastest to zlib's own defaults.
SETTINGS: list[tuple[str, Compression | None]] = [
    ("plain", None),
    ("gzip 1, window 2^10 (level 1)", Compression(1, 10, 1)),
    ("gzip 6, window 2^10 (the default)", Compression()),
    ("gzip 6, window 2^12, memory 2", Compression(6, 12, 2)),
    ("gzip 6, window 2^15, memory 8 (zlib's)", Compression(6, 15, 8)),
    ("gzip 1, window 2^10, context: event", Compression(1, 10, 1, "event")),
    ("gzip 6, window 2^10, context: event", Compression(context="event")),
    ("gzip 6, window 2^15, memory 8, context: event", Compression(6, 15, 8, "event")),
]
SHAPES = {"trickle": 1, "burst": 50}


class Headers:
    def getRawHeaders(self, name: bytes) -> list[bytes] | None:  # noqa: N802 - Twisted's name
        return None

    def getAllRawHeaders(self) -> list[tuple[bytes, list[bytes]]]:  # noqa: N802
        return []


class Request:
    """What `SseServer.render` and `SseStream` use of a Twisted request; writes are counted."""

    method = b"GET"
    path = b"/events/orders"
    uri = b"/events/orders"
    chunked = False

    def __init__(self, accept: bytes | None) -> None:
        self.accept = accept
        self.requestHeaders = Headers()
        self.sent = 0
        self.sentLength = 0

    def getHeader(self, name: bytes) -> bytes | None:  # noqa: N802 - Twisted's name
        return self.accept if name == b"accept-encoding" else None

    def setResponseCode(self, code: int) -> None:  # noqa: N802
        pass

    def setHeader(self, name: bytes, value: bytes) -> None:  # noqa: N802
        pass

    def registerProducer(self, producer: Any, streaming: bool) -> None:  # noqa: N802
        pass

    def notifyFinish(self) -> Deferred[None]:  # noqa: N802
        return Deferred()

    def write(self, data: bytes) -> None:
        self.sent += len(data)


class Handle:
    compress = True

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


class Source:
    def __init__(self) -> None:
        self.sinks: list[Any] = []

    def open(self, request: Any, sink: Any) -> Handle:
        self.sinks.append(sink)
        return Handle()


def events(n: int, seed: int = 5) -> list[bytes]:
    """`n` events of a topic of orders, ids as a 4-partition stream's `${etag}` ids."""
    rng = random.Random(seed)
    offsets = [0] * 4
    out = []
    for i in range(n):
        offsets[i % 4] += 1
        doc = {"id": f"order-{rng.randrange(10**6)}", "customer": f"customer-{rng.randrange(5000)}",
               "status": rng.choice(["open", "paid", "shipped", "cancelled"]),
               "lines": [{"sku": f"SKU-{rng.randrange(10**4):05d}", "qty": rng.randrange(1, 5),
                          "price": round(rng.uniform(1, 200), 2)}
                         for _ in range(rng.randrange(1, 4))],
               "updated": 1_700_000_000_000 + i * 137}
        token = ProgressId.encode(dict(enumerate(offsets)))
        out.append(b"id:%s\ndata:%s\n\n" % (token.encode(), json.dumps(doc).encode()))
    return out


def run(setting: Compression | None, per_write: int, writes: int) -> dict[str, Any]:
    source = Source()
    server = SseServer("sse", source, MemoryReactorClock(), EventLog("bench"),  # type: ignore[arg-type]
                       max_idle=1e9, compression=setting)
    requests = [Request(b"gzip, deflate, br") for _ in range(STREAMS)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for r in requests:
        server.render(r, HttpContext("http"))  # type: ignore[arg-type]
    gc.collect()
    opened = tracemalloc.take_snapshot()
    tracemalloc.stop()
    per_stream = sum(s.size_diff for s in opened.compare_to(before, "filename")) / STREAMS
    stream_events = events(per_write * writes)
    batches = [b"".join(stream_events[i:i + per_write])
               for i in range(0, len(stream_events), per_write)]
    plain = sum(map(len, batches))
    sent_at_start = [r.sent for r in requests]
    sinks = source.sinks
    t0 = time.process_time()
    for batch in batches:  # the same bytes to every stream in turn, as a tail group writes
        for sink in sinks:
            sink.write(batch)
    cpu = time.process_time() - t0
    sent = sum(r.sent - s for r, s in zip(requests, sent_at_start)) / STREAMS
    return {"wire": round(sent / plain, 3), "bytes_per_event": round(sent / len(stream_events), 1),
            "plain_bytes_per_event": round(plain / len(stream_events), 1),
            "us_per_write": round(cpu / (STREAMS * writes) * 1e6, 2),
            "us_per_event": round(cpu / (STREAMS * len(stream_events)) * 1e6, 3),
            "cpu_s_per_1000_streams_per_10k_events": round(cpu / len(stream_events) * 10_000, 2),
            "stream_bytes": round(per_stream),
            "formula_bytes": setting.memory_per_stream() if setting is not None else 0}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    writes = 40 if args.quick else 200
    rows = []
    for shape, per_write in SHAPES.items():
        for name, setting in SETTINGS:
            r = run(setting, per_write, writes if per_write == 1 else max(4, writes // 10))
            rows.append({"shape": shape, "setting": name,
                         "context": setting.context if setting is not None else None, **r})
            print(f"{shape:8} {name:45} {r}", flush=True)
    print()
    print(table(f"gzip at {STREAMS:,} streams (in-process, per stream)",
                ["writes", "setting", "wire/plain", "bytes/event", "µs/write", "µs/event",
                 "memory/stream (formula)"],
                [[x["shape"], x["setting"], x["wire"], x["bytes_per_event"], x["us_per_write"],
                  x["us_per_event"], f"{x['stream_bytes']:,} ({x['formula_bytes']:,})"]
                 for x in rows]))
    result = {"streams": STREAMS, "writes": writes, "rows": rows}
    print(f"\nwritten to {write_result('compression', result)}")
    return result


if __name__ == "__main__":
    main()
