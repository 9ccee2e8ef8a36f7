"""HTTP/2 gets the http binding's request limits: header size (advertised as
SETTINGS_MAX_HEADER_LIST_SIZE and enforced), header count, a deadline for a header block (a
CONTINUATION that never ends), and `limits.h2-streams` as SETTINGS_MAX_CONCURRENT_STREAMS."""

from __future__ import annotations

from pathlib import Path

import h2.errors
import h2.events
import h2.settings
import pytest
from hyperframe.frame import ContinuationFrame, Frame, HeadersFrame
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.channel import LIMITS_SCHEMA, Limits
from ssekd.dev.broker import Broker, free_port
from tests.support.daemon import start_daemon
from tests.support.http_fakes import GetOnly, H2Peer, http_site
from tests.support.reliability import RawH2, daemon_config

Codes = h2.settings.SettingCodes


def _peer(**limits: float) -> H2Peer:
    return H2Peer(http_site(MemoryReactorClock(), GetOnly(), Limits(**limits)))  # type: ignore[arg-type]


def test_settings_advertise_the_header_and_stream_limits() -> None:
    peer = _peer(header_bytes=4096, h2_streams=7)
    settings = peer.of(h2.events.RemoteSettingsChanged)[0].changed_settings
    assert settings[Codes.MAX_HEADER_LIST_SIZE].new_value == 4096
    assert settings[Codes.MAX_CONCURRENT_STREAMS].new_value == 7


def test_a_header_block_over_header_bytes_ends_the_connection() -> None:
    peer = _peer(header_bytes=4096)
    stream_id = peer.request("GET", "/", headers=[("x-big", "v" * 5000)])
    peer.send()
    peer.read()
    goaway = peer.goaway()
    assert goaway is not None and peer.transport.disconnecting
    assert peer.status(stream_id) is None


@pytest.mark.daemon
@pytest.mark.broker
def test_a_header_block_within_header_bytes_is_served() -> None:
    peer = _peer(header_bytes=4096)
    stream_id = peer.request("GET", "/", headers=[("x-big", "v" * 3000)])
    peer.send()
    peer.read()
    assert peer.status(stream_id) == "200" and peer.goaway() is None


def test_more_headers_than_header_count_is_431_on_that_stream() -> None:
    events = GetOnly()
    peer = H2Peer(http_site(MemoryReactorClock(), events, Limits(header_count=10)))
    crowded = peer.request("GET", "/", headers=[(f"x-h{n}", "1") for n in range(11)])
    peer.send()
    peer.read()
    assert peer.status(crowded) == "431" and events.rendered == []
    fine = peer.request("GET", "/", headers=[(f"x-h{n}", "1") for n in range(10)])
    peer.send()
    peer.read()
    assert peer.status(fine) == "200" and peer.goaway() is None


def _header_block(peer: H2Peer) -> tuple[int, bytes]:
    """A GET's header block as the client's HPACK encoder made it (so both ends' tables agree and
    the client knows the stream), to be framed by the test."""
    stream_id = peer.request("GET", "/")
    data = peer.client.data_to_send()
    frame, length = Frame.parse_frame_header(memoryview(data[:9]))
    frame.parse_body(memoryview(data[9:9 + length]))
    assert isinstance(frame, HeadersFrame) and len(data) == 9 + length
    return stream_id, bytes(frame.data)


def test_a_header_block_that_never_ends_gets_goaway_at_the_header_timeout() -> None:
    peer = _peer(header_timeout=10.0, idle_timeout=60.0)
    stream_id, block = _header_block(peer)
    peer.send_raw(HeadersFrame(stream_id, data=block, flags=["END_STREAM"]).serialize())
    for _ in range(9):  # a CONTINUATION every second keeps the connection from being idle
        peer.clock.advance(1.0)
        peer.send_raw(ContinuationFrame(stream_id, data=b"").serialize())
    peer.read()
    assert not peer.transport.disconnecting  # 9 s in
    peer.clock.advance(1.0)
    peer.read()
    assert peer.transport.disconnecting
    goaway = peer.goaway()
    assert goaway is not None
    assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


def test_a_headers_frame_trickled_a_byte_at_a_time_gets_the_same_deadline() -> None:
    peer = _peer(header_timeout=10.0, idle_timeout=60.0)
    stream_id, block = _header_block(peer)
    wire = HeadersFrame(stream_id, data=block, flags=["END_STREAM", "END_HEADERS", "PADDED"],
                        pad_length=200).serialize()
    sent = 0
    while peer.clock.seconds() < 12:  # a byte every 0.1 s: 120 of its 200-odd bytes
        peer.send_raw(wire[sent:sent + 1])
        sent += 1
        peer.clock.advance(0.1)
    assert sent < len(wire)
    peer.read()
    assert peer.transport.disconnecting and peer.goaway() is not None


@pytest.mark.daemon
@pytest.mark.broker
def test_a_block_completed_in_time_is_served_and_disarms_the_deadline() -> None:
    peer = _peer(header_timeout=10.0, idle_timeout=60.0)
    stream_id, block = _header_block(peer)
    peer.send_raw(HeadersFrame(stream_id, data=block[:2], flags=["END_STREAM"]).serialize())
    peer.clock.advance(9)
    peer.send_raw(ContinuationFrame(stream_id, data=block[2:], flags=["END_HEADERS"]).serialize())
    peer.read()
    assert peer.status(stream_id) == "200"
    peer.clock.advance(30)
    peer.read()
    assert not peer.transport.disconnecting and peer.goaway() is None


def test_h2_limits_are_documented_keys() -> None:
    for key in ("h2-streams", "h2-resets", "body-timeout"):
        prop = LIMITS_SCHEMA["properties"][key]
        assert prop["description"] and "default" in prop
    assert Limits.from_options({"h2-streams": 5, "h2-resets": 7}).h2_streams == 5


@pytest.mark.daemon
@pytest.mark.broker
def test_the_daemon_advertises_its_configured_limits(
        kafka_broker: Broker, tmp_path: Path) -> None:
    port = free_port()
    config = daemon_config(tmp_path, port, kafka_broker.bootstrap,
                           limits="{header-bytes: 4096, h2-streams: 7}")
    daemon = start_daemon(config, wait_ports=[port])
    try:
        client = RawH2(port)
        try:
            assert client.wait(lambda: bool(client.of(h2.events.RemoteSettingsChanged)))
            settings = client.of(h2.events.RemoteSettingsChanged)[0].changed_settings
            assert settings[Codes.MAX_HEADER_LIST_SIZE].new_value == 4096
            assert settings[Codes.MAX_CONCURRENT_STREAMS].new_value == 7
        finally:
            client.close()
    finally:
        daemon.stop()


@pytest.mark.parametrize("key", ["h2-streams", "h2-resets"])
def test_h2_counts_must_be_positive(key: str) -> None:
    from jsonschema import Draft202012Validator

    errors = list(Draft202012Validator(LIMITS_SCHEMA).iter_errors({key: 0}))
    assert errors
