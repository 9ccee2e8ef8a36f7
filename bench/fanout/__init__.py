"""Fan-out benchmark: many SSE clients (HTTP/1.1) on one topic while a producer writes at a
fixed rate. Starts its own broker (tansu) and daemon (`twistd -n ssekd`) on free ports.

Reports, per scenario: delivered events/s in aggregate, produce->receive latency p50/p99, the
daemon's CPU and RSS per connection; and one client's catch-up rate against a bare
confluent-kafka consumer on the same topic. Prints a table and writes bench/results/fanout.json.

How the clients are measured (they share the daemon's cores, so they must stay cheap):

- one process reads all the streams of a scenario with `recv_into` into one preallocated buffer
  and counts events with `bytearray.count(b"id:")` (plus a 4-byte check for an `id:` split
  across reads): C-level work per read, no per-event Python;
- every stream is drained and counted; `complete` is how many streams got exactly every event
  produced (`over` counts streams that got more: a duplicate), so a miss anywhere shows;
- latency (receive time minus the producer's timestamp in the payload) is parsed on a fixed
  sample of 50 streams spread over the clients, so its cost does not grow with the client count;
- the reader's own CPU share is reported next to the daemon's, to show it is not the bottleneck;
- the single-client comparison runs the bare consumer (cold), the SSE stream while the daemon's
  cache loads the topic from Kafka (cold), the SSE stream served from the cache, then the bare
  consumer again, and compares each SSE rate with the faster bare run.

The machine's load average is recorded with each scenario: run it more than once on a shared
machine and compare ranges.

    python -m bench.fanout                 # all scenarios (a few minutes), from the checkout's root
    python -m bench.fanout --quick         # smaller numbers, for development
    python -m bench.fanout --only fanout --only single

The package: `rig` (broker, daemon, baseline bridge, the counting clients), `scenarios` (what
is measured, and `main`), `report` (the table and the plot).
"""

from __future__ import annotations

from bench.fanout.scenarios import main

__all__ = ["main"]
