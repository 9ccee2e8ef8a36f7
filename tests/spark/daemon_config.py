"""A daemon config (zilla.yaml) whose kafka cache_server gives topics models, for the snapshot
job's `--config`."""

from __future__ import annotations

from pathlib import Path

from tests.support import zilla_config as zc


def daemon_config(folder: Path, topics: str, catalogs: str) -> Path:
    """A daemon config that serves topics from a cache_server with `topics` (its models); both
    arguments are YAML text, the entries under `topics:` and under `catalogs:`."""
    bindings = zc.sse_stack(8080, "127.0.0.1:9092", properties={},
                            cache={"topics": zc.flow(topics)},
                            names={"tcp": "tcp0", "http": "http0", "sse": "sse0",
                                   "sse_kafka": "sk", "cache_client": "cc",
                                   "cache_server": "cs", "kafka_client": "kc"})["bindings"]
    del bindings["kc"]["options"]["properties"]
    bindings["kc"]["exit"] = "tcp1"
    bindings["tcp1"] = {"type": "tcp", "kind": "client"}
    config = zc.zilla("pipeline", bindings, catalogs=zc.flow(catalogs))
    return zc.write(folder / "zilla.yaml", config)
