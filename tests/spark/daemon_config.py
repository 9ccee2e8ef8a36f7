"""A daemon config (zilla.yaml) whose kafka cache_server gives topics models, for the snapshot
job's `--config`."""

from __future__ import annotations

from pathlib import Path


def daemon_config(folder: Path, topics: str, catalogs: str) -> Path:
    """A daemon config that serves topics from a cache_server with `topics` (its models)."""
    text = f"""\
name: pipeline
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: 8080}}
    exit: http0
  http0:
    type: http
    kind: server
    exit: sse0
  sse0:
    type: sse
    kind: server
    exit: sk
  sk:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{{path: "/{{topic}}"}}]
        exit: cc
        with: {{topic: "${{params.topic}}"}}
  cc:
    type: kafka
    kind: cache_client
    exit: cs
  cs:
    type: kafka
    kind: cache_server
    options:
      topics:
{topics}
    exit: kc
  kc:
    type: kafka
    kind: client
    options: {{servers: ["127.0.0.1:9092"]}}
    exit: tcp1
  tcp1:
    type: tcp
    kind: client
catalogs:
{catalogs}
"""
    path = folder / "zilla.yaml"
    path.write_text(text)
    return path
