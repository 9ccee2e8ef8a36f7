"""Zilla's public `asyncapi.sse.kafka.proxy` example (the `etc/` of
tests/data/zilla-examples/asyncapi.sse.kafka.proxy: its zilla.yaml and two specs) and ssekd's
guarded variant of it (tests/data/asyncapi-guarded), made runnable here by changing only the
hosts they name: the SSE server's `localhost:7114` becomes a free port, the Kafka broker
`kafka.examples.dev:29092` the test broker."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.data import DATA

#: Where the example's files are, under `DATA` (and under the folder `adapt` copies them to: the
#: guarded variant refers to the example's Kafka spec by this relative path).
WHERE = Path("zilla-examples") / "asyncapi.sse.kafka.proxy" / "etc"
EXAMPLE = DATA / WHERE
GUARDED = DATA / "asyncapi-guarded"
#: The hosts the example names (and nothing else is changed).
SSE_HOST = "localhost:7114"
KAFKA_HOST = "kafka.examples.dev:29092"


def adapt(folder: Path, port: int, bootstrap: str) -> Path:
    """Copy the example and its guarded variant into `folder` with the hosts replaced; the
    zilla.yaml of the example (`<folder>/zilla-examples/asyncapi.sse.kafka.proxy/etc/zilla.yaml`)."""
    for source, where in ((EXAMPLE, WHERE), (GUARDED, Path(GUARDED.name))):
        target = folder / where
        shutil.copytree(source, target, dirs_exist_ok=True)
        for file in target.rglob("*.yaml"):
            text = file.read_text(encoding="utf-8")
            file.write_text(text.replace(SSE_HOST, f"localhost:{port}")
                            .replace(KAFKA_HOST, bootstrap), encoding="utf-8")
    return folder / WHERE / "zilla.yaml"
