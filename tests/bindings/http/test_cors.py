"""What counts as the same origin for the http binding's same-origin policy."""

from __future__ import annotations

from ssekd.bindings.http.cors import same_origin


def test_same_origin_uses_default_ports() -> None:
    assert same_origin("http://localhost", "http", "localhost:80")
    assert same_origin("https://LOCALHOST:7143", "https", "localhost:7143")
    assert not same_origin("http://localhost:7143", "https", "localhost:7143")
    assert not same_origin("null", "http", "localhost:80")
    assert not same_origin("http://[::1", "http", "localhost:80")


def test_cors_allow_methods_and_headers_replace_the_echo() -> None:
    from twisted.web.test.requesthelper import DummyRequest

    from ssekd.bindings.http.cors import AccessControl

    cors = AccessControl.from_options({"policy": "cross-origin",
                                       "allow": {"origins": ["https://a.example"],
                                                 "methods": ["GET", "HEAD"],
                                                 "headers": ["last-event-id"]}})
    request = DummyRequest([b""])
    request.method = b"OPTIONS"
    request.requestHeaders.setRawHeaders(b"access-control-request-method", [b"GET"])
    request.requestHeaders.setRawHeaders(b"access-control-request-headers", [b"x-other"])
    cors.answer_preflight(request, b"https://a.example")
    answered = request.responseHeaders
    assert answered.getRawHeaders(b"access-control-allow-methods") == [b"GET, HEAD"]
    assert answered.getRawHeaders(b"access-control-allow-headers") == [b"last-event-id"]

