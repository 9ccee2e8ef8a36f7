"""A daemon config for the model tests: one topic with a value model, its catalogs, the demo
page's files under `/www/`, streams at `/events/{topic}`, the AsyncAPI document at
`/asyncapi.yaml`."""

from __future__ import annotations

from pathlib import Path

from tests.support import zilla_config as zc
from tests.support.streamd import WWW


def config(bootstrap: str, port: int, topic: str, model: str, catalogs: str) -> zc.Node:
    """The arguments as `write_model_config` says."""
    return zc.sse_stack(port, bootstrap, name="models", www=WWW,
                        routes=[zc.sse_route("/events/{topic}")],
                        http=zc.http_server(asyncapi={"path": "/asyncapi.yaml"}),
                        sse=zc.sse_server(retry=200),
                        cache={"topics": [{"name": topic, "value": zc.flow(model)}]},
                        catalogs=zc.flow(catalogs))


def write_model_config(tmp: Path, bootstrap: str, port: int, topic: str, model: str,
                       catalogs: str) -> Path:
    """`model` is the flow-style YAML of the topic's value model; `catalogs` the indented
    entries under `catalogs:`."""
    path = tmp / f"models-{port}.yaml"
    return zc.write(path, config(bootstrap, port, topic, model, catalogs))
