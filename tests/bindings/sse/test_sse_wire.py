"""The SSE wire format: fields, multi-line data, and the pieces the encoder's hot path writes,
which make the same bytes as the general event writer."""

from __future__ import annotations

import pytest

from ssekd.bindings.sse.wire import CR, LF, event_bytes, id_data_event


@pytest.mark.parametrize("data", [b"", b"{\"a\":1}", "é".encode(), b"x" * 1000])
def test_id_data_event_is_event_bytes(data: bytes) -> None:
    assert LF not in data and CR not in data
    assert id_data_event(b"AQIAAg==", data) == event_bytes("AQIAAg==", None, data)
    assert id_data_event(b"AQIAAg==", data) == b"id:AQIAAg==\ndata:" + data + b"\n\n"


def test_wire_format() -> None:
    assert event_bytes("1", None, b"a\nb") == b"id:1\ndata:a\ndata:b\n\n"
    assert event_bytes("1", "delete", None) == b"id:1\nevent:delete\n\n"
    assert event_bytes(None, None, b"x\r\ny\rz") == b"data:x\ndata:y\ndata:z\n\n"
    assert event_bytes("1", None, b"") == b"id:1\ndata:\n\n"
