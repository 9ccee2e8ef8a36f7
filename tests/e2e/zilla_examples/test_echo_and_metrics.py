"""Zilla's echo examples on ssekd: tcp.echo, tls.echo (client certificates and the x509 guard),
http.proxy.jwt (an http server guarded by jwt in front of an echo server) and http.metrics (its
echo, and the Prometheus page with the http server's `telemetry.attributes` as labels), each
started as published (`tests.support.zilla_examples`) and checked the way its `.github/test.sh`
checks it, with real clients: a socket for `nc`, `openssl s_client` with the example's keys,
PyJWT for jwt-cli (RS256, kid `example`, the example's `private.pem`), curl. Then further: bytes
of every value and several connections at once, the x509 identity on an http route behind the
tls server, what the guarded http route answers with no token, a bad token and HTTP/2, and the
labels on the metrics page."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.daemon import start_daemon
from tests.support.wait import wait_until
from tests.support.zilla_examples import Example

pytestmark = [pytest.mark.daemon]

INPUT = "Hello, Zilla!"


# -- tcp.echo -------------------------------------------------------------------------------


def echo_over_tcp(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """What `echo "$INPUT" | nc -w 1 localhost $PORT` prints: the bytes sent (while reading, as
    nc does), read back until as many came (or the connection ended)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        sender = threading.Thread(target=s.sendall, args=(data,), daemon=True)
        sender.start()
        got = b""
        while len(got) < len(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        sender.join(timeout)
    return got


def test_tcp_echo_as_test_sh_does(run_example: RunExample) -> None:
    example = run_example("tcp.echo", kafka=False)
    port = example.port(12345)
    line = (INPUT + "\n").encode()
    assert echo_over_tcp(port, line).decode().rstrip("\n") == INPUT


def test_tcp_echo_sends_back_every_byte_on_each_connection(run_example: RunExample) -> None:
    """Every byte value, a payload larger than a socket's buffers, and connections side by side,
    each getting its own bytes only."""
    example = run_example("tcp.echo", kafka=False)
    port = example.port(12345)
    assert echo_over_tcp(port, bytes(range(256))) == bytes(range(256))
    big = bytes(i % 251 for i in range(3 << 20))
    assert echo_over_tcp(port, big, timeout=30) == big
    first = socket.create_connection(("127.0.0.1", port), timeout=5)
    second = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        first.sendall(b"one")
        second.sendall(b"two")
        assert first.recv(10) == b"one" and second.recv(10) == b"two"
        first.sendall(b"again")
        assert first.recv(10) == b"again"
    finally:
        first.close()
        second.close()


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def test_a_client_that_writes_and_never_reads_costs_the_daemon_no_memory(
        run_example: RunExample) -> None:
    """The echo server reads no faster than its client takes the bytes back: a client writing
    64 MiB without reading stalls once the kernel buffers between them are full, and the
    daemon holds none of it (without that, it read all 64 MiB and kept them to send)."""
    example = run_example("tcp.echo", kafka=False)
    assert example.daemon is not None
    pids = list(example.daemon.worker_pids().values()) or [example.daemon.process.pid]
    before = rss_kib(pids)
    sent = 0
    with socket.create_connection(("127.0.0.1", example.port(12345)), timeout=3) as s:
        block = b"x" * 65536
        try:
            while sent < 64 << 20:
                s.sendall(block)
                sent += len(block)
        except TimeoutError:
            pass
        grown = rss_kib(pids) - before
    assert sent < 32 << 20, f"{sent >> 20} MiB went in unread"
    assert grown < 16 << 10, f"the daemon grew by {grown >> 10} MiB"


# -- tls.echo -------------------------------------------------------------------------------


def s_client(example: Example, port: int, alpn: str, cert: str | None = None,
             expect: str | None = INPUT, timeout: float = 10.0) -> str:
    """test.sh's `{ echo "$INPUT"; sleep 2; } | openssl s_client -connect localhost:$PORT
    -CAfile test-ca.crt [-cert C -key K] -quiet -alpn A -no_ign_eof`: the line is sent, and
    instead of a fixed sleep the input ends once `expect` came back, or - when nothing is to
    come back - once s_client ended on its own (the server closed) or `timeout` passed."""
    args = ["openssl", "s_client", "-connect", f"localhost:{port}",
            "-CAfile", str(example.source / "test-ca.crt"), "-quiet", "-alpn", alpn,
            "-no_ign_eof"]
    if cert is not None:
        args += ["-cert", str(example.source / f"{cert}.crt"),
                 "-key", str(example.source / f"{cert}.key")]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.extend(iter(
        lambda: proc.stdout.read1(4096) if proc.stdout else b"", b"")), daemon=True)
    reader.start()
    assert proc.stdin is not None
    proc.stdin.write((INPUT + "\n").encode())
    proc.stdin.flush()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if expect is not None and expect.encode() in b"".join(out):
            break
        time.sleep(0.05)
    try:
        proc.stdin.close()
    except BrokenPipeError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(5)
    return b"".join(out).decode(errors="replace").rstrip("\n")


def test_tls_echo_as_test_sh_does(run_example: RunExample) -> None:
    """The four cases of test.sh: `echo` without a client certificate echoes; `secure-echo`
    (guarded by the x509 guard, role `client` for certificates issued by `Test Client CA` to
    `client-*`) echoes nothing without a certificate, nothing with other.crt (issued by the
    other trusted CA: the handshake passes, the role does not), and echoes with client.crt."""
    example = run_example("tls.echo", kafka=False)
    port = example.port(23456)
    assert s_client(example, port, "echo") == INPUT
    assert s_client(example, port, "secure-echo", expect=None) == ""
    assert s_client(example, port, "secure-echo", "other", expect=None) == ""
    assert s_client(example, port, "secure-echo", "client") == INPUT
    # each refusal says why, in the guard's event, naming the certificate, never its content
    assert example.daemon is not None
    example.daemon.wait_output("GUARD_X509_AUTHORIZATION_FAILED")
    failures = [line for line in example.daemon.output().splitlines()
                if "GUARD_X509_AUTHORIZATION_FAILED" in line]
    assert any("no client certificate" in line for line in failures), failures
    assert any("client-2 lacks role(s) client" in line for line in failures), failures
    assert not any("client-1" in line for line in failures), failures


def whoami_config(example: Example, www: Path) -> Path:
    """The tls.echo example with one more route on its tls server: `http/1.1` goes to an http
    server whose route `/whoami` is guarded by the same x509 guard (role `client`) and answers
    the file named after the identity: `${guarded['my_clients'].identity}.txt`."""
    config = yaml.safe_load(example.config.read_text())
    tls = config["bindings"]["north_tls_server"]
    tls["options"]["alpn"].append("http/1.1")
    tls["routes"].append({"when": [{"alpn": "http/1.1"}], "exit": "north_http_server"})
    config["bindings"].update({
        "north_http_server": {
            "type": "http", "kind": "server", "options": {"versions": ["http/1.1"]},
            "routes": [{"when": [{"headers": {":path": "/whoami"}}],
                        "guarded": {"my_clients": ["client"]}, "exit": "north_whoami"}]},
        "north_whoami": {
            "type": "http-filesystem", "kind": "proxy",
            "routes": [{"when": [{"path": "/whoami"}], "exit": "north_files",
                        "with": {"path": "${guarded['my_clients'].identity}.txt"}}]},
        "north_files": {"type": "filesystem", "kind": "server",
                        "options": {"location": str(www)}},
    })
    path = example.config.with_name("whoami.yaml")
    path.write_text(yaml.safe_dump(config))
    return path


def curl_tls(example: Example, port: int, path: str, cert: str | None = None) -> tuple[int, str]:
    args = ["curl", "-s", "--http1.1", "--cacert", str(example.source / "test-ca.crt"),
            "-o", "-", "-w", "\n%{http_code}", f"https://localhost:{port}{path}"]
    if cert is not None:
        args += ["--cert", str(example.source / f"{cert}.crt"),
                 "--key", str(example.source / f"{cert}.key")]
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=20)
    body, _, code = done.stdout.rpartition("\n")
    return int(code or 0), body


def test_the_x509_identity_reaches_an_http_route_behind_the_tls_server(
        run_example: RunExample, tmp_path: Path) -> None:
    """Beyond test.sh: the session the client certificate opened travels with the connection
    to the http server behind the tls server. Its route guarded by the x509 guard takes
    client-1 (role `client`) and names the file by its identity (`subject.cn`); client-2 (no
    role) and a client without a certificate find no route there: `404`, as in Zilla."""
    example = run_example("tls.echo", kafka=False, start=False)
    www = tmp_path / "www"
    www.mkdir()
    (www / "client-1.txt").write_text("hello client-1\n")
    (www / "client-2.txt").write_text("hello client-2\n")
    config = whoami_config(example, www)
    port = example.port(23456)
    daemon = start_daemon(config, env=example.env, wait_ports=[port])
    try:
        assert curl_tls(example, port, "/whoami", "client") == (200, "hello client-1\n")
        assert curl_tls(example, port, "/whoami", "other") == (404, "")
        assert curl_tls(example, port, "/whoami") == (404, "")
        assert s_client(example, port, "secure-echo", "client") == INPUT  # still there
    finally:
        daemon.stop()


# -- http.proxy.jwt -------------------------------------------------------------------------

ISSUER = "https://auth.example.com"
AUDIENCE = "https://api.example.com"


def jwt_cli(example: Example, scope: str | None = None, **claims: Any) -> str:
    """test.sh's `jwt-cli encode --alg RS256 --kid example --iss ... --aud ... --exp=+1d
    --no-iat [--payload scope=...] --secret @/private.pem`."""
    payload: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 86400,
                               **claims}
    if scope is not None:
        payload["scope"] = scope
    private = (example.source / "private.pem").read_bytes()
    return jwt.encode(payload, private, algorithm="RS256", headers={"kid": "example"})


def curl(*args: str) -> tuple[int, str, str]:
    """(status, headers, body) of one curl request."""
    done = subprocess.run(["curl", "-s", "-D", "-", "-o", "-", "-w", "\n%{http_code}", *args],
                          capture_output=True, check=False, timeout=20)
    text, _, code = done.stdout.decode("latin-1").rpartition("\n")
    head, _, body = text.partition("\r\n\r\n")
    return int(code or 0), head.lower(), body


def test_http_proxy_jwt_as_test_sh_does(run_example: RunExample) -> None:
    """A valid token without the route's `echo:stream` scope finds no route: `404`, nothing said
    about why; with the scope the body comes back."""
    example = run_example("http.proxy.jwt", kafka=False)
    url = f"http://localhost:{example.port(7114)}/"
    message = "Hello, world"
    plain = ["-H", "Content-Type: text/plain", "-d", message, url]
    status, _, body = curl("-H", f"Authorization: Bearer {jwt_cli(example)}", *plain)
    assert (status, body) == (404, "")
    status, _, body = curl("-H", f"Authorization: Bearer {jwt_cli(example, 'echo:stream')}",
                           *plain)
    assert (status, body) == (200, message)


def test_http_proxy_jwt_refuses_and_echoes_beyond_test_sh(run_example: RunExample) -> None:
    """No token `401` (`WWW-Authenticate: Bearer`), a bad one `403`; a good one echoes over
    HTTP/1.1 and h2c alike, with the request's `Content-Type` and the rest of its headers but
    not its `Authorization`; the scope-less token's refusal is the guard's event."""
    example = run_example("http.proxy.jwt", kafka=False)
    url = f"http://localhost:{example.port(7114)}/"
    data = ["-H", "Content-Type: text/plain", "-H", "X-Trace: t-1", "-d", "Hello, world", url]
    status, head, _ = curl(*data)
    assert status == 401 and "www-authenticate: bearer" in head
    forged = jwt_cli(example, "echo:stream")[:-4] + "AAAA"
    assert curl("-H", f"Authorization: Bearer {forged}", *data)[0] == 403
    good = jwt_cli(example, "echo:stream", sub="alice")
    for version in ("--http1.1", "--http2-prior-knowledge"):
        status, head, body = curl(version, "-H", f"Authorization: Bearer {good}", *data)
        assert (status, body) == (200, "Hello, world"), version
        assert "content-type: text/plain" in head and "x-trace: t-1" in head, head
        assert "authorization" not in head and good not in head
        assert "content-length: 12" in head
    assert curl("-H", f"Authorization: Bearer {jwt_cli(example, sub='bob')}", *data)[0] == 404
    assert example.daemon is not None
    example.daemon.wait_output("bob lacks role(s) echo:stream")


# -- http.metrics ---------------------------------------------------------------------------


def test_http_metrics_as_test_sh_does(run_example: RunExample) -> None:
    """test.sh: the POST to /items is echoed, and the metrics page answers."""
    example = run_example("http.metrics", kafka=False)
    out = subprocess.run(["curl", "-sf", "-d", INPUT,
                          f"http://localhost:{example.port(7114)}/items"],
                         capture_output=True, text=True, check=True).stdout
    assert out == INPUT
    subprocess.run(["curl", "-sf", f"http://localhost:{example.port(7190)}/metrics"],
                   capture_output=True, check=True)


def series(page: str, family: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of `family` on a Prometheus page: its labels -> value."""
    found = {}
    for line in page.splitlines():
        m = re.fullmatch(rf"{re.escape(family)}\{{(.*)\}} (\S+)", line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m[1]))
            found[labels] = float(m[2])
    return found


def labelled(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset({"namespace": "example", "binding": "north_http_server", **labels}.items())


def test_http_metrics_labels_each_series_with_the_request_attributes(
        run_example: RunExample) -> None:
    """Beyond test.sh: the http server's `telemetry.attributes` (`method: ${http.request.method}`,
    `path: ${http.request.path}`) are labels of its http series on the Prometheus page, one
    series per method and path, and none without them; the query string is not part of the
    path."""
    example = run_example("http.metrics", kafka=False)
    base = f"http://localhost:{example.port(7114)}"
    for args in (["-d", INPUT, f"{base}/items"], ["-d", INPUT, f"{base}/items"],
                 [f"{base}/other?access_token=secret-in-query"]):
        subprocess.run(["curl", "-sf", *args], capture_output=True, check=True)
    metrics = f"http://localhost:{example.port(7190)}/metrics"

    def page() -> str:
        return subprocess.run(["curl", "-sf", metrics], capture_output=True, text=True,
                              check=True).stdout

    wait_until(lambda: len(series(page(), "http_duration_milliseconds_count")) == 2, 10)
    text = page()
    get, post = labelled(method="GET", path="/other"), labelled(method="POST", path="/items")
    assert series(text, "http_duration_milliseconds_count") == {get: 1.0, post: 2.0}
    assert series(text, "http_response_size_bytes_sum") == {get: 0.0, post: 2.0 * len(INPUT)}
    assert series(text, "http_request_size_bytes_sum") == {get: 0.0, post: 2.0 * len(INPUT)}
    assert series(text, "http_active_requests") == {get: 0.0, post: 0.0}
    assert "secret-in-query" not in text


@pytest.fixture(autouse=True)
def _openssl_and_curl() -> None:
    for program in ("openssl", "curl"):
        assert shutil.which(program), f"{program} is needed (make test installs it)"


@pytest.mark.parametrize("version", [[], ["--http2-prior-knowledge"]])
def test_http_echo_as_its_readme_shows(run_example: RunExample, version: list[str]) -> None:
    """http.echo has no test.sh; its README shows `curl -d "Hello, world" http://localhost:7114/`
    answered `Hello, world` - over HTTP/1.1, and over HTTP/2 in clear text (prior knowledge)."""
    example = run_example("http.echo", kafka=False)
    done = subprocess.run(["curl", "-s", *version, "-d", "Hello, world",
                           f"http://localhost:{example.port(7114)}/"],
                          capture_output=True, text=True, check=False, timeout=30)
    assert done.stdout == "Hello, world", done
