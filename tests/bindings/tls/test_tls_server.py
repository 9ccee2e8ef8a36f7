"""The tls server binding against real clients: openssl s_client, curl, Python's ssl module.

Each test runs the real daemon (twistd) on loopback ports, serving a static file behind
tcp -> tls -> http -> http-filesystem -> filesystem, so no broker is needed.
"""

from __future__ import annotations

import re
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon
from tests.support.pki import ENV, Pki, run, s_client, subject, tls_config

pytestmark = [pytest.mark.daemon]

SEED_TLS = "{keys: [localhost], sni: [localhost], alpn: [http/1.1, h2]}"


def alpn(out: str) -> str:
    m = re.search(r"^ALPN protocol: (\S+)|^(No ALPN negotiated)", out, re.MULTILINE)
    assert m, out
    return m.group(1) or "none"


def curl(*args: str) -> Any:
    return run(["curl", "-sS", "--max-time", "10", "-w", "\n%{http_version}", *args])


FAILURE = re.compile(r"tlstest:tls_in \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] "
                     r"BINDING_TLS_HANDSHAKE_FAILED 127\.0\.0\.1:(\d+) (.+)")


def handshake_failures(daemon: Daemon) -> list[tuple[int, str]]:
    """(client port, reason) of each handshake failure the daemon reported, in order; every such
    line must have the event's whole format."""
    lines = [line for line in daemon.output().splitlines()
             if "BINDING_TLS_HANDSHAKE_FAILED" in line]
    matches = [FAILURE.fullmatch(line) for line in lines]
    assert all(matches), lines
    return [(int(m.group(1)), m.group(2)) for m in matches if m]


def test_seed_config_sni_and_alpn(tls_daemon: Any) -> None:
    _, port, _ = tls_daemon(SEED_TLS)
    out = s_client(port, "-servername", "localhost", "-alpn", "h2").stdout
    assert subject(out) == "CN=localhost"
    assert alpn(out) == "h2"
    assert alpn(s_client(port, "-servername", "localhost", "-alpn", "http/1.1").stdout) == \
        "http/1.1"
    # not offered by the binding: no protocol, the connection still works
    assert alpn(s_client(port, "-servername", "localhost", "-alpn", "spdy/3").stdout) == "none"


def test_curl_http2_and_http11_over_tls_and_h2c(tls_daemon: Any, pki: Pki) -> None:
    _, port, clear = tls_daemon(SEED_TLS)
    url = f"https://localhost:{port}/index.html"
    resolve = ["--resolve", f"localhost:{port}:127.0.0.1", "--cacert", str(pki.ca_pem)]
    # the client's order decides among what `alpn` lists (as Zilla): curl prefers h2
    h2 = curl("--http2", *resolve, url)
    assert h2.stdout == "hello over tls\n\n2", h2.stderr
    h1 = curl("--http1.1", *resolve, url)
    assert h1.stdout == "hello over tls\n\n1.1", h1.stderr
    h2c = curl("--http2-prior-knowledge", f"http://127.0.0.1:{clear}/index.html")
    assert h2c.stdout == "hello over tls\n\n2", h2c.stderr
    plain = curl(f"http://127.0.0.1:{clear}/index.html")
    assert plain.stdout == "hello over tls\n\n1.1", plain.stderr


def test_sni_picks_the_key_unknown_names_get_the_first(tls_daemon: Any, pki: Pki) -> None:
    assert pki.multi is not None, "keytool (Java, installed by make test) is needed"
    _, port, _ = tls_daemon("{keys: [localhost, other], alpn: [h2, http/1.1]}", store=pki.multi)
    assert subject(s_client(port, "-servername", "localhost").stdout) == "CN=localhost"
    assert subject(s_client(port, "-servername", "other.test").stdout) == "CN=other.test"
    assert subject(s_client(port, "-servername", "unknown.test").stdout) == "CN=localhost"
    assert subject(s_client(port, "-noservername").stdout) == "CN=localhost"


def test_sni_list_limits_the_names_that_choose(tls_daemon: Any, pki: Pki) -> None:
    assert pki.multi is not None, "keytool (Java, installed by make test) is needed"
    # other.test is a key of the binding but not an accepted name: served like an unknown name
    _, port, _ = tls_daemon("{keys: [localhost, other], sni: [localhost]}", store=pki.multi)
    assert subject(s_client(port, "-servername", "other.test").stdout) == "CN=localhost"


def test_routes_by_alpn_and_authority(tls_daemon: Any, pki: Pki, tmp_path: Any) -> None:
    (tmp_path / "h2www").mkdir()
    (tmp_path / "h2www" / "index.html").write_text("h2 side\n")
    extra = """
    routes:
      - when: [{alpn: h2}]
        exit: h2_http
      - when: [{authority: "*.example"}]
        exit: h2_http
  h2_http:
    type: http
    kind: server
    exit: h2_map
  h2_map:
    type: http-filesystem
    kind: proxy
    routes:
      - exit: h2_files
        when: [{path: "/{path}"}]
        with: {path: "${params.path}"}
  h2_files:
    type: filesystem
    kind: server
    options: {location: h2www/}
"""
    _, port, _ = tls_daemon("{keys: [localhost], alpn: [h2, http/1.1]}", tls_extra=extra)
    base = ["--cacert", str(pki.ca_pem), "--resolve", f"localhost:{port}:127.0.0.1",
            "--resolve", f"www.example:{port}:127.0.0.1"]
    assert curl("--http2", *base, f"https://localhost:{port}/").stdout == "h2 side\n\n2"
    assert curl("--http1.1", *base, f"https://localhost:{port}/").stdout == \
        "hello over tls\n\n1.1"
    # the authority route (the certificate does not cover www.example: skip verification)
    assert curl("--http1.1", "-k", *base, f"https://www.example:{port}/").stdout == \
        "h2 side\n\n1.1"


def test_versions_limit_what_is_negotiated(tls_daemon: Any, pki: Pki) -> None:
    _, port, clear = tls_daemon(SEED_TLS, http_options="{versions: [http/1.1]}")
    assert alpn(s_client(port, "-servername", "localhost", "-alpn", "h2,http/1.1").stdout) == \
        "http/1.1"
    assert alpn(s_client(port, "-servername", "localhost", "-alpn", "h2").stdout) == "none"
    h2c = curl("--http2-prior-knowledge", f"http://127.0.0.1:{clear}/index.html")
    assert h2c.returncode != 0  # the preface is a bad HTTP/1.1 request here


def test_http2_only_binding_refuses_http11(tls_daemon: Any) -> None:
    _, _, clear = tls_daemon(SEED_TLS, http_options="{versions: [h2]}")
    assert curl("--http2-prior-knowledge", f"http://127.0.0.1:{clear}/index.html").stdout == \
        "hello over tls\n\n2"
    out = run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
               f"http://127.0.0.1:{clear}/index.html"]).stdout
    assert out == "505"


def test_mutual_required(tls_daemon: Any, pki: Pki) -> None:
    daemon, port, _ = tls_daemon("{keys: [localhost], trust: [clientca], mutual: required}",
                                 trust=True)
    url = f"https://localhost:{port}/index.html"
    base = ["--cacert", str(pki.ca_pem), "--resolve", f"localhost:{port}:127.0.0.1"]
    refused = curl(*base, url)
    assert refused.returncode != 0 and "hello" not in refused.stdout
    stranger = curl(*base, "--cert", str(pki.stranger_cert), "--key", str(pki.stranger_key), url)
    assert stranger.returncode != 0 and "hello" not in stranger.stdout
    served = curl(*base, "--cert", str(pki.client_cert), "--key", str(pki.client_key),
                  url + "?served")
    assert served.stdout == "hello over tls\n\n1.1", served.stderr  # no `alpn`: HTTP/1.1
    # the served request comes after both refusals: once it is logged, so are they
    daemon.wait_output("BINDING_HTTP_REQUEST_ACCEPTED - GET https://localhost:"
                       f"{port}/index.html?served")
    assert [reason for _, reason in handshake_failures(daemon)] == \
        ["peer did not return a certificate", "certificate verify failed"]


def test_trust_alone_means_mutual_required(tls_daemon: Any, pki: Pki) -> None:
    _, port, _ = tls_daemon("{keys: [localhost], trust: [clientca]}", trust=True)
    base = ["--cacert", str(pki.ca_pem), "--resolve", f"localhost:{port}:127.0.0.1"]
    assert curl(*base, f"https://localhost:{port}/").returncode != 0


def test_mutual_requested_serves_without_a_certificate(tls_daemon: Any, pki: Pki) -> None:
    _, port, _ = tls_daemon("{keys: [localhost], trust: [clientca], mutual: requested}",
                            trust=True)
    base = ["--cacert", str(pki.ca_pem), "--resolve", f"localhost:{port}:127.0.0.1"]
    assert curl(*base, f"https://localhost:{port}/index.html").stdout == "hello over tls\n\n1.1"


def _open_tls(port: int, pki: Pki) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return context.wrap_socket(raw, server_hostname="localhost")


def _get(sock: ssl.SSLSocket, path: str = "/index.html") -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    data = b""
    while b"hello over tls" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_failed_handshakes_touch_nothing_else(tls_daemon: Any, pki: Pki) -> None:
    daemon, port, _ = tls_daemon(SEED_TLS)
    established = _open_tls(port, pki)
    assert b"hello over tls" in _get(established)

    with socket.create_connection(("127.0.0.1", port), timeout=5) as garbage:
        garbage.sendall(b"\x16\x03\x01\x00\x05garbage that is not a ClientHello\r\n\r\n")
        # a fatal TLS alert record (level 2) saying unexpected_message (10), then the end
        assert garbage.recv(4096) == b"\x15\x03\x03\x00\x02\x02\x0a"
        assert garbage.recv(4096) == b""
        garbage_port = garbage.getsockname()[1]
    old = s_client(port, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0")
    assert old.returncode == 1
    assert "New, (NONE), Cipher is (NONE)" in old.stdout
    assert "alert protocol version" in old.stderr, old.stderr  # TLS 1.1 refused: TLS 1.2+
    with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
        plain.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert plain.recv(4096) == b"", "plain HTTP on the TLS port: closed, nothing served"
        plain_port = plain.getsockname()[1]

    # the connection made before is still served, and so are new ones
    assert b"hello over tls" in _get(established)
    established.close()
    assert b"hello over tls" in _get(_open_tls(port, pki), "/index.html?after")

    # that last request comes after every failure: once it is logged, so are they
    daemon.wait_output("BINDING_HTTP_REQUEST_ACCEPTED - GET https://localhost:443/index.html?after")
    failures = handshake_failures(daemon)
    assert [reason for _, reason in failures] == \
        ["unexpected message", "unsupported protocol", "http request"]
    assert (failures[0][0], failures[2][0]) == (garbage_port, plain_port)


def test_tls_signers_serve_the_keys_they_issued(tmp_path: Path, pki: Pki,
                                                run_daemon: Any) -> None:
    assert pki.multi is not None, "keytool (Java, installed by make test) is needed"
    # `keys` names localhost only; the CA in the `signers` store issued other.test's key too
    config, port, clear = tls_config(tmp_path, pki, "{keys: [localhost], signers: [ca]}",
                                     store=pki.multi)
    text = config.read_text()
    keys = "    options:\n      keys:\n"
    assert keys in text
    config.write_text(text.replace(keys, f"    options:\n      signers:\n"
                                         f"        store: {pki.keys}\n"
                                         "        type: pkcs12\n"
                                         "        password: ${{env.KEYSTORE_PASSWORD}}\n"
                                         "      keys:\n"))
    run_daemon(config, env=ENV, wait_ports=[port, clear])
    assert subject(s_client(port, "-servername", "other.test").stdout) == "CN=other.test"
    assert subject(s_client(port, "-servername", "localhost").stdout) == "CN=localhost"

