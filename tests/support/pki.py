"""A throwaway PKI in a folder, and daemon configs around a tls binding.

Stores are made the way users make them: single-key stores with `cryptography` (as
`ssekd.dev.certs` does), multi-key stores with Java's `keytool` (what Zilla users have).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from ssekd.dev.broker import free_port
from ssekd.dev.certs import Issued, issue, make_ca, write_store
from tests.support import zilla_config as zc

PASSWORD = "test-store-pw"
KEYTOOL = shutil.which("keytool")


@dataclass(frozen=True)
class Pki:
    folder: Path
    ca_pem: Path  # trusts every server certificate below
    keys: Path  # alias localhost (+ the CA as a certificate entry)
    multi: Path | None  # aliases localhost and other (CN other.test); None without keytool
    trust: Path  # alias clientca: the CA that signs trusted client certificates
    client_cert: Path  # signed by clientca
    client_key: Path
    stranger_cert: Path  # signed by a CA nobody trusts
    stranger_key: Path


def _pem_pair(folder: Path, name: str, issued: Issued) -> tuple[Path, Path]:
    cert = folder / f"{name}.pem"
    key = folder / f"{name}.key"
    cert.write_bytes(issued.cert.public_bytes(Encoding.PEM))
    key.write_bytes(issued.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    return cert, key


def write_pem(path: Path, issued: Issued) -> Path:
    """The certificate and its key in one PEM file, as HAProxy's `crt` takes them."""
    path.write_bytes(issued.cert.public_bytes(Encoding.PEM)
                     + issued.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    return path


def keytool_merge(target: Path, sources: list[Path], password: str) -> None:
    """Merge single-key stores into one multi-key PKCS#12 store with keytool."""
    assert KEYTOOL is not None
    for src in sources:
        subprocess.run([KEYTOOL, "-importkeystore", "-noprompt",
                        "-srckeystore", str(src), "-srcstoretype", "pkcs12",
                        "-srcstorepass", password,
                        "-destkeystore", str(target), "-deststoretype", "pkcs12",
                        "-deststorepass", password],
                       check=True, capture_output=True, timeout=60)


def make_pki(folder: Path) -> Pki:
    """Make every key, certificate and store of `Pki` in `folder`."""
    ca = make_ca("ssekd test CA")
    localhost = issue(ca, ["localhost", "127.0.0.1"])
    other = issue(ca, ["other.test"])
    write_store(folder / "keys.p12", "localhost", localhost, PASSWORD,
                extra=[("ca", ca.cert)])
    ca_pem = folder / "ca.pem"
    ca_pem.write_bytes(ca.cert.public_bytes(Encoding.PEM))

    multi = None
    if KEYTOOL:
        write_store(folder / "one.p12", "localhost", localhost, PASSWORD)
        write_store(folder / "two.p12", "other", other, PASSWORD)
        multi = folder / "multi.p12"
        keytool_merge(multi, [folder / "one.p12", folder / "two.p12"], PASSWORD)

    client_ca = make_ca("ssekd test client CA")
    write_store(folder / "trust.p12", None, None, PASSWORD, extra=[("clientca", client_ca.cert)])
    client_cert, client_key = _pem_pair(folder, "client",
                                        issue(client_ca, ["alice"], client=True))
    stranger_cert, stranger_key = _pem_pair(folder, "stranger",
                                            issue(make_ca("stranger CA"), ["mallory"],
                                                  client=True))
    return Pki(folder, ca_pem, folder / "keys.p12", multi, folder / "trust.p12",
               client_cert, client_key, stranger_cert, stranger_key)


def tls_config(folder: Path, pki: Pki, tls_options: str, *, store: Path | None = None,
               trust: bool = False, http_options: str = "{}", tls_extra: str = "",
               password: str = "${{env.KEYSTORE_PASSWORD}}",
               metrics_port: int | None = None) -> tuple[Path, int, int]:
    """A config serving `folder/www` over TLS and cleartext; returns (path, tls port, h2c port).

    `tls_options` is the YAML flow mapping of the tls binding's options; `tls_extra` is YAML as
    it would stand after the tls binding: its keys indented by 4 (e.g. routes), more bindings
    by 2. `metrics_port` adds a prometheus exporter (`prom`) on that port.
    """
    www = folder / "www"
    www.mkdir(exist_ok=True)
    (www / "index.html").write_text("hello over tls\n")
    tls_port, clear_port = free_port(), free_port()
    tls_more, more_bindings = _tls_extra(tls_extra)
    trust_store = {"store": str(pki.trust), "type": "pkcs12", "password": password}
    bindings: zc.Node = {
        "tcp_in": zc.tcp_server([tls_port, clear_port], None,
                                routes=[zc.port_route(tls_port, "tls_in"),
                                        zc.port_route(clear_port, "http_in")]),
        "tls_in": {"type": "tls", "kind": "server", "vault": "server",
                   "options": zc.Flow(zc.flow(tls_options)), "exit": "http_in", **tls_more},
        **more_bindings,
        "http_in": zc.http_server("files_map", options=http_options),
        **zc.files("www/", prefix="/")}
    config = zc.zilla("tlstest", bindings,
                      vaults={"server": zc.keys_vault(store or pki.keys, password,
                                                      trust=trust_store if trust else None)},
                      telemetry=zc.stdout_telemetry("out"))
    if metrics_port is not None:
        config["telemetry"]["exporters"]["prom"] = {
            "type": "prometheus", "options": {"endpoints": [{"port": metrics_port}]}}
    return zc.write(folder / "zilla.yaml", config), tls_port, clear_port


def _tls_extra(tls_extra: str) -> tuple[zc.Node, zc.Node]:
    """`tls_extra` read as `tls_config` says: (keys indented by 4, that extend the tls binding;
    bindings indented by 2, added after it)."""
    if not tls_extra.strip():
        return {}, {}
    parsed = yaml.safe_load("  tls_in:\n    __tls__: true\n" + tls_extra.strip("\n") + "\n")
    tls_keys = {k: v for k, v in parsed.pop("tls_in").items() if k != "__tls__"}
    return tls_keys, parsed


ENV = {"KEYSTORE_PASSWORD": PASSWORD}


def run(cmd: list[str], input: bytes = b"", timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run a client program; output as text (errors replaced), never raising on exit status."""
    done = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout, check=False)
    return subprocess.CompletedProcess(cmd, done.returncode,
                                       done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


def s_client(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`openssl s_client` that connects, shows the handshake and quits."""
    return run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", *args], input=b"Q\n")


# -- SSE over TLS and HTTP/2, against a real broker ---------------------------------------------

def sse_config(folder: Path, store: Path, bootstrap: str, *, idle_timeout: float = 60,
               keepalive: float = 15) -> tuple[Path, int, int]:
    """tcp -> tls (h2, http/1.1) and h2c -> http -> sse -> sse-kafka -> kafka, on free ports."""
    tls_port, clear_port = free_port(), free_port()
    config = zc.sse_stack(
        [tls_port, clear_port], bootstrap, name="h2test",
        tls=zc.tls_server("server", sni=["localhost"], alpn=["http/1.1", "h2"]),
        vaults={"server": zc.keys_vault(store, "${{env.KEYSTORE_PASSWORD}}")},
        http=zc.http_server(limits={"idle-timeout": idle_timeout}),
        sse=zc.sse_server(max_idle_time=keepalive), telemetry=zc.stdout_telemetry("out"),
        names={"tcp": "tcp_in", "tls": "tls_in", "http": "http_in"})
    return zc.write(folder / f"sse-{tls_port}.yaml", config), tls_port, clear_port


def subject(out: str) -> str:
    """The certificate subject `openssl s_client` printed, without spaces (`CN=localhost`)."""
    m = re.search(r"^subject=(.*)$", out, re.MULTILINE)
    assert m, out
    return m.group(1).replace(" ", "")
