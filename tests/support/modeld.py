"""A daemon config for the model tests: one topic with a value model, its catalogs, the demo
page's files under `/www/`, streams at `/events/{topic}`, the AsyncAPI document at
`/asyncapi.yaml`."""

from __future__ import annotations

from pathlib import Path

from tests.support.streamd import WWW, WWW_FILES

CONFIG = """\
name: models
bindings:
  tcp:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: {port}}}
    exit: http
  http:
    type: http
    kind: server
    options:
      asyncapi: {{path: /asyncapi.yaml}}
    routes:
      - when: [{{headers: {{":path": "/www/*"}}}}]
        exit: files_map
    exit: sse
""" + WWW_FILES + """  sse:
    type: sse
    kind: server
    options: {{retry: 200}}
    exit: sse_kafka
  sse_kafka:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{{path: "/events/{{topic}}"}}]
        exit: cache_client
        with: {{topic: "${{params.topic}}"}}
  cache_client:
    type: kafka
    kind: cache_client
    exit: cache_server
  cache_server:
    type: kafka
    kind: cache_server
    options:
      topics:
        - name: {topic}
          value: {model}
    exit: kafka_client
  kafka_client:
    type: kafka
    kind: client
    options:
      servers: ["{bootstrap}"]
      properties: {{fetch.wait.max.ms: 10}}
catalogs:
{catalogs}
telemetry:
  exporters:
    stdout:
      type: stdout
"""


def write_model_config(tmp: Path, bootstrap: str, port: int, topic: str, model: str,
                       catalogs: str) -> Path:
    """`model` is the flow-style YAML of the topic's value model; `catalogs` the indented
    entries under `catalogs:`."""
    path = tmp / f"models-{port}.yaml"
    path.write_text(CONFIG.format(port=port, www=str(WWW), bootstrap=bootstrap, topic=topic,
                                  model=model, catalogs=catalogs))
    return path
