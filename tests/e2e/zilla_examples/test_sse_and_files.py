"""Zilla's SSE and static-file examples on ssekd: sse.kafka.fanout (the config inline in its
compose file), http.filesystem and asyncapi.sse.kafka.proxy, each started as published and
checked with curl as its `.github/test.sh` checks it."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.broker import Kafka
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon]


def curl_stream(url: str, seconds: float = 3.0) -> list[str]:
    """The `data:` lines `timeout 3s curl -N --http2 -H Accept:text/event-stream URL` prints."""
    done = subprocess.run(["curl", "-s", "-N", "--http2", "--max-time", str(seconds),
                           "-H", "Accept:text/event-stream", url],
                          capture_output=True, text=True, check=False)
    return [line for line in done.stdout.splitlines() if line.startswith("data:")]


@pytest.mark.broker
def test_fanout_streams_a_key_and_tag_as_test_sh_does(run_example: RunExample) -> None:
    """The record keyed `1` with header `tag: abc` on `events` is streamed at
    `/events/1/abc` (the route's key and header filters); another key or tag is not. (The
    topic is compacted, as its kafka-init makes it: each key's latest record is what a new
    stream gets.)"""
    example = run_example("sse.kafka.fanout")
    assert example.bootstrap is not None
    port = example.port(7114)
    kafka = Kafka(example.bootstrap)
    kafka.produce("events", b'{"id":1,"name":"Hello World!"}', b"1", headers=[("tag", b"abc")])
    kafka.produce("events", b'{"id":2,"name":"other"}', b"2", headers=[("tag", b"abc")])
    kafka.produce("events", b'{"id":3,"name":"other tag"}', b"3", headers=[("tag", b"xyz")])
    kafka.flush()
    expected = ['data:{"id":1,"name":"Hello World!"}']
    wait_until(lambda: curl_stream(f"http://localhost:{port}/events/1/abc") == expected, 30,
               interval=1)
    assert curl_stream(f"http://localhost:{port}/events/2/xyz", 2) == []
    assert curl_stream(f"http://localhost:{port}/events/3/abc", 2) == []
    assert curl_stream(f"http://localhost:{port}/events/3/xyz", 2) == \
        ['data:{"id":3,"name":"other tag"}']
    page = subprocess.run(["curl", "-s", f"http://localhost:{port}/index.html"],
                          capture_output=True, text=True, check=True).stdout
    assert "<title>Welcome to Zilla!</title>" in page


def test_filesystem_serves_the_page_as_test_sh_does(run_example: RunExample) -> None:
    example = run_example("http.filesystem", kafka=False)
    port = example.port(7114)
    expected = (example.source / "www" / "index.html").read_text().rstrip("\n")
    out = subprocess.run(["curl", "-s", f"http://localhost:{port}/index.html"],
                         capture_output=True, text=True, check=True).stdout
    assert out.rstrip("\n") == expected
    assert "<h1>Welcome to Zilla!</h1>" in out


@pytest.mark.broker
def test_asyncapi_proxy_streams_events_as_test_sh_does(run_example: RunExample) -> None:
    example = run_example("asyncapi.sse.kafka.proxy")
    assert example.bootstrap is not None
    port = example.port(7114)
    kafka = Kafka(example.bootstrap)
    kafka.produce("events", b'{"id": 1,"name":"Hello World!"}', b"1")
    kafka.flush()
    expected = ['data:{"id": 1,"name":"Hello World!"}']
    wait_until(lambda: curl_stream(f"http://localhost:{port}/events") == expected, 30,
               interval=1)
