"""`limits.body-timeout`: a whole HTTP/1.1 request body must arrive within a deadline, so a body
trickled a byte at a time cannot hold a connection (Twisted's idle timeout restarts with every
byte). Timing on a clock, no sleeping."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.channel import DEFAULT_BODY_TIMEOUT, LIMITS_SCHEMA, Limits
from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.spi.plugins import discover
from tests.support.http_fakes import Upload, chunk, http11, http_site


def test_a_trickled_body_gets_408_at_the_deadline() -> None:
    clock = MemoryReactorClock()
    upload = Upload()
    site = http_site(clock, upload, Limits(body_timeout=30.0, idle_timeout=60.0))
    proto, transport = http11(site)
    proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(5):  # a byte every 5.5 s: well inside the idle timeout every time
        clock.advance(5.5)
        proto.dataReceived(chunk(b"x"))
    assert not transport.disconnecting  # 27.5 s in
    clock.advance(2.5)
    assert transport.value().startswith(b"HTTP/1.1 408 ")
    assert transport.disconnecting
    assert upload.bodies == []


def test_a_body_announced_by_length_has_the_same_deadline() -> None:
    clock = MemoryReactorClock()
    proto, transport = http11(http_site(clock, Upload(), Limits(body_timeout=3.0)))
    proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    clock.advance(2.9)
    assert not transport.disconnecting
    clock.advance(0.2)
    assert transport.value().startswith(b"HTTP/1.1 408 ") and transport.disconnecting


def test_the_deadline_ends_with_the_body() -> None:
    clock = MemoryReactorClock()
    upload = Upload()
    proto, transport = http11(http_site(clock, upload, Limits(body_timeout=3.0)))
    proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n")
    clock.advance(2)
    proto.dataReceived(b"abc")
    clock.advance(10)  # handling the request takes as long as it takes
    assert upload.bodies == [b"abc"]
    assert transport.value().startswith(b"HTTP/1.1 200 ") and not transport.disconnecting
    # and the next request on the connection gets its own deadline
    transport.clear()
    proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\na")
    clock.advance(3.1)
    assert transport.value().startswith(b"HTTP/1.1 408 ")


def test_body_timeout_is_a_documented_limit() -> None:
    prop = LIMITS_SCHEMA["properties"]["body-timeout"]
    assert prop["default"] == DEFAULT_BODY_TIMEOUT and prop["description"]
    assert Limits.from_options({"body-timeout": 5}).body_timeout == 5.0
    assert Limits().body_timeout == DEFAULT_BODY_TIMEOUT


def test_body_timeout_must_be_positive(tmp_path: Path) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text("name: t\nbindings:\n  tcp0: {type: tcp, kind: server, "
                      "options: {host: 127.0.0.1, port: 8080}, exit: http0}\n"
                      "  http0: {type: http, kind: server, options: {limits: {body-timeout: 0}},"
                      " exit: files}\n"
                      "  files: {type: http-filesystem, kind: proxy, routes: [], exit: fs}\n"
                      "  fs: {type: filesystem, kind: server, options: {location: www}}\n")
    with pytest.raises(ConfigError, match="body-timeout"):
        load_config(config, discover())
