"""Models benchmark: what checking records against a schema costs.

1. Validation alone, in-process on one core: records/s checked by a topic's model - a JSON
   model (JSON Schema, compiled once) and an Avro model (plain, and Confluent wire format;
   both turned into JSON, as `view: json` delivers them) - over the fan-out benchmark's record
   shape (a timestamp and 100 bytes of padding).
2. Fan-out with a JSON model on the topic against the same fan-out without: `clients` SSE
   streams on one topic while a producer writes JSON records at a fixed rate, with
   `bench/fanout`'s rig and counting clients; delivered events/s compared (the goal: within
   10%, since each record is checked once at the cache, not once per stream). The runs
   alternate (without, with, without, with) so a change in the machine's load shows.

    python -m bench.models            # 1,000 streams, 10 s per fan-out run
    python -m bench.models --quick    # shorter runs, fewer records
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import fastavro
from twisted.internet.task import Clock

from bench.fanout import rig as fanout
from bench.fanout.scenarios import fanout as run_fanout
from ssekd.catalogs.catalog import Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import FieldModel, ModelConfig
from tests.support import zilla_config as zc

ROOT = Path(__file__).resolve().parents[1]

TOPIC = "bench-models"
JSON_SCHEMA = {"type": "object", "required": ["at", "pad"], "additionalProperties": False,
               "properties": {"at": {"type": "number", "minimum": 0},
                              "pad": {"type": "string", "maxLength": 1000}}}
AVRO_SCHEMA = {"type": "record", "name": "Tick",
               "fields": [{"name": "at", "type": "double"}, {"name": "pad", "type": "string"}]}


class _IdCatalog(LocalCatalog):
    """A local catalog that may also know one registry id (as a registry would), so that
    wire-format records are checked in-process without a server."""

    def __init__(self, schema: Schema, has_ids: bool) -> None:
        super().__init__("bench", {"tick": schema})
        self.schema = schema
        self.has_ids = has_ids

    def known_id(self, schema_id: int) -> Schema | None:
        return self.schema if schema_id == 1 else None


def _model(kind: str, wire: bool = False) -> FieldModel:
    text = json.dumps(JSON_SCHEMA if kind == "json" else AVRO_SCHEMA)
    catalog = _IdCatalog(Schema("tick", 1, 1, text), has_ids=wire)
    config = ModelConfig.parse(TOPIC, "value", {"model": kind, "view": "json",
                                                "catalog": {"bench": [{"subject": "tick"}]}})
    field = FieldModel(config, catalog, Clock(), lambda n, d: None)
    field.resolve()
    assert field.ready
    return field


def validation(n: int) -> dict[str, Any]:
    """Records/s one core checks, per model (best of three passes)."""
    pad = "x" * 100
    records = [{"at": 1_763_900_000.0 + i / 1000, "pad": pad} for i in range(1000)]
    as_json = [json.dumps(r).encode() for r in records]
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    as_avro = []
    for r in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, r)
        as_avro.append(out.getvalue())
    wire = [b"\0\0\0\0\1" + v for v in as_avro]
    results: dict[str, Any] = {}
    for name, kind, values in (("json", "json", as_json), ("avro", "avro", as_avro),
                               ("avro_wire", "avro", wire)):
        field = _model(kind, wire=name == "avro_wire")
        assert json.loads(field.check(values[0]))["pad"] == pad
        best = 0.0
        for _ in range(3):
            started = time.process_time()
            done = 0
            while done < n:
                for v in values:
                    field.check(v)
                done += len(values)
            best = max(best, done / (time.process_time() - started))
        results[name] = {"records_per_s_per_core": round(best),
                         "us_per_record": round(1e6 / best, 2)}
    return results


def _config(model: bool) -> fanout.Config:
    """The fan-out config with the benchmark topic listed (live, so every run starts at the
    end), with or without a JSON model on its values."""
    def config(port: int, bootstrap: str, metrics_port: int) -> zc.Node:
        built = fanout.config(port, bootstrap, metrics_port)
        topic: zc.Node = {"name": TOPIC, "defaultOffset": "live"}
        if model:
            topic["value"] = {"model": "json", "catalog": {"bench": [{"subject": "tick"}]}}
        built["bindings"]["cache_server"]["options"]["topics"] = [topic]
        built["catalogs"] = {"bench": {"type": "inline", "options": {
            "subjects": {"tick": {"schema": json.dumps(JSON_SCHEMA)}}}}}
        return built
    return config


class _Rig(fanout.Rig):
    """The fan-out rig on one fixed topic (the one with the model), fed JSON records."""

    created = False

    def topic(self, name: str, partitions: int = 3) -> str:
        if not self.created:
            super().topic(TOPIC, partitions)
            self.created = True
        return TOPIC

    def produce_at(self, topic: str, rate: float, seconds: float, pad: int = 100) -> int:
        padding = "x" * pad
        sent = 0
        start = time.time()
        while (elapsed := time.time() - start) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                value = json.dumps({"at": time.time(), "pad": padding}).encode()
                self.producer.produce(topic, value)
                sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(10)
        return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=250)
    args = parser.parse_args(argv)
    q = args.quick
    clients = 200 if q else args.clients
    seconds = 5 if q else 10
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                           "python": sys.version.split()[0]}}
    results["validation"] = validation(20_000 if q else 100_000)
    runs: list[dict[str, Any]] = []
    for model in (False, True, False, True):
        rig = _Rig(_config(model))
        try:
            run_fanout(rig, 20, args.rate, 2)  # warm the cache and consumer
            run = run_fanout(rig, clients, args.rate, seconds)
            run["model"] = "json" if model else "none"
            runs.append(run)
        finally:
            rig.close()
    results["fanout"] = runs

    def mean(model: str) -> float:
        xs = [r["delivered_per_s"] for r in runs if r["model"] == model]
        return sum(xs) / len(xs)

    results["json_vs_none"] = round(mean("json") / mean("none"), 3)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "models.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    return 0


def print_table(r: dict[str, Any]) -> None:
    print(f"\nssekd models benchmark ({r['machine']['cpus']} cpus)\n")
    print("validation alone (one core, the fan-out record shape, delivered as JSON):")
    for name, v in r["validation"].items():
        print(f"  {name:>9}: {v['records_per_s_per_core']:>9,} records/s  "
              f"({v['us_per_record']} us each)")
    print("\nfan-out, every stream counted (latency is not sampled: the values are JSON):")
    print(f"{'model':>6} {'clients':>8} {'ev/s/cl':>8} {'delivered/s':>12} {'complete':>11} "
          f"{'daemon %':>9} {'load':>5}")
    for x in r["fanout"]:
        print(f"{x['model']:>6} {x['clients']:>8} {x['rate']:>8.0f} {x['delivered_per_s']:>12,} "
              f"{x['complete']:>5}/{x['clients']:<5} {x['daemon_cpu_pct']:>9} "
              f"{x['load_avg']:>5}")
    print(f"\nwith a JSON model / without, delivered: {r['json_vs_none']}")


if __name__ == "__main__":
    sys.exit(main())
