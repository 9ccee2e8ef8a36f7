"""What a large cache costs the garbage collector, in-process (no sockets, no broker).

A topic read from its start goes through the consumer thread's conversion
(`from_confluent_batch`, confluent-kafka records made by hand) and the cache's `append`, in
batches of 2,000, with the collector set as the daemon sets it (`ssekd.tap`: young threshold
20,000, start-up frozen). Per cache size:

- `µs/record`: process time per record of converting and appending while the cache grows from
  empty to that size (the collector's share is the difference with `gc off`, the same with the
  collector disabled);
- `full collection ms`: one `gc.collect()` with the cache full, best of 3: the pause every stream
  of the process waits through each time the collector runs a full collection;
- `tracked`: the objects the collector follows once the cache is full.

    python -m bench.cache_gc            # 100,000, 300,000 and 1,000,000 records
    python -m bench.cache_gc --quick    # 100,000 and 300,000
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

from confluent_kafka import Message as KafkaRecord

from bench.common import table, write_result
from ssekd.bindings.kafka.message import from_confluent_batch
from ssekd.bindings.kafka.topic_log import CacheBounds, TopicLog
from ssekd.tap import GC_YOUNG_THRESHOLD

BATCH = 2_000
KEYS = 50_000
VALUE = b'{"status": "shipped", "items": 3, "total": 1234}' + b" " * 52  # 100 bytes


def _records(n: int) -> list[list[Any]]:
    """`n` records over 3 partitions in batches, as librdkafka hands them to the consumer."""
    ts = int(time.time() * 1000)
    out = []
    for start in range(0, n, BATCH):
        out.append([KafkaRecord(topic="t", partition=i % 3, offset=i // 3,
                                key=b"key-%d" % (i % KEYS), value=VALUE, timestamp=(1, ts))
                    for i in range(start, min(n, start + BATCH))])
    return out


def run(n: int, collector: bool) -> dict[str, Any]:
    batches = _records(n)
    gc.collect()
    gc.freeze()  # what the benchmark made is not the daemon's: out of every collection
    threshold = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *threshold[1:])
    if not collector:
        gc.disable()
    log = TopicLog("t", CacheBounds(max_messages=n + 1, max_bytes=1 << 40))
    try:
        cpu = time.process_time()
        for batch in batches:
            log.append(from_confluent_batch(batch), now=0)
        cpu = time.process_time() - cpu
        gc.enable()
        pauses = []
        for _ in range(3):
            t = time.perf_counter()
            gc.collect()
            pauses.append(time.perf_counter() - t)
        tracked = len(gc.get_objects())
    finally:
        gc.enable()
        gc.set_threshold(*threshold)
        gc.unfreeze()
    assert log.count == n
    return {"records": n, "collector": collector, "us_per_record": round(cpu / n * 1e6, 3),
            "full_collection_ms": round(min(pauses) * 1000, 1), "tracked": tracked}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    sizes = [100_000, 300_000] if args.quick else [100_000, 300_000, 1_000_000]
    rows = []
    for n in sizes:
        on, off = run(n, True), run(n, False)
        rows.append({"records": n, "us_per_record": on["us_per_record"],
                     "us_per_record_gc_off": off["us_per_record"],
                     "full_collection_ms": on["full_collection_ms"], "tracked": on["tracked"]})
        print(rows[-1], flush=True)
    print()
    print(table("a cold read into the cache, in-process (convert and append, per record)",
                ["records cached", "µs/record", "µs/record, gc off", "full collection ms",
                 "tracked objects"],
                [[r["records"], r["us_per_record"], r["us_per_record_gc_off"],
                  r["full_collection_ms"], r["tracked"]] for r in rows]))
    result = {"batch": BATCH, "rows": rows}
    print(f"\nwritten to {write_result('cache_gc', result)}")
    return result


if __name__ == "__main__":
    main()
