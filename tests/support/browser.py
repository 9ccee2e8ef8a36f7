"""Headless Chromium driven over `--remote-debugging-pipe` (CDP as NUL-terminated JSON on fds 3
and 4), which needs no websocket client. Chromium is installed by `make test`.

QUIC is off (`--disable-quic`) unless a test names the origins to reach over HTTP/3
(`quic_origins`). Chromium only speaks HTTP/3 to a test origin when told to: it learns of h3
from an `Alt-Svc` header only on connections whose certificate chains to a public root, never
to a test CA (checked with Chromium 156: the page stays on TCP), so a test forces QUIC with
`--origin-to-force-quic-on`, after which every request to that origin, the page's own
included, goes over QUIC with no fallback to TCP."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: What Chromium answers an evaluation that meets the page's navigation (a reload under way).
NAVIGATED = "Inspected target navigated or closed"


class Browser:
    """Chromium with CDP over a pipe."""

    def __init__(self, url: str, env: dict[str, str] | None = None, *,
                 quic_origins: list[str] | None = None, spki: list[str] | None = None,
                 host_rules: str | None = None) -> None:
        """`env` adds to the environment: `HOME` picks the NSS database of trusted CAs
        (`~/.pki/nssdb`, see `trust_ca`).

        `quic_origins` (`host:port`, the UDP port) are reached over QUIC/HTTP/3 only. Their
        certificate must verify: signed by a CA that `trust_ca` made trusted, or with its
        public key among `spki` (`spki_pin`), which skips verification for that key alone.
        `host_rules` are Chromium's `--host-resolver-rules`; with `quic_origins` they default to
        `MAP localhost 127.0.0.1`, because Chromium tries `::1` first for `localhost` and
        QUIC, unlike TCP, does not fall back to the next address: a server on 127.0.0.1 alone
        is then never reached (`ERR_QUIC_HANDSHAKE_FAILED`)."""
        network = ["--disable-quic"]
        if quic_origins:
            network = [f"--origin-to-force-quic-on={','.join(quic_origins)}"]
            if host_rules is None:
                host_rules = "MAP localhost 127.0.0.1"
        if spki:
            network.append(f"--ignore-certificate-errors-spki-list={','.join(spki)}")
        if host_rules:
            network.append(f"--host-resolver-rules={host_rules}")
        self.profile = tempfile.mkdtemp(prefix="ssekd-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire_fds() -> None:  # runs in the child, before fds not kept are closed
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", *network,
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
             url],
            pass_fds=(3, 4, to_chrome_r, from_chrome_w),
            preexec_fn=wire_fds,  # noqa: PLW1509 - only dup2 calls, needed to place fds 3 and 4
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})})
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.session: str | None = None
        self._sessions: dict[str, str] = {}

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self._buf:
                raw, _, self._buf = self._buf.partition(b"\0")
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise AssertionError(reply["error"])
                    return dict(reply.get("result", {}))
            self._buf += os.read(self._from_chrome, 1 << 16)
        raise AssertionError(f"no CDP reply to {method}")

    def evaluate(self, expression: str, tab: str | None = None) -> Any:
        """`expression`'s value in the first page, or in the page `tab` (from `open_tab`)."""
        if tab is None:
            if self.session is None:
                self.session = self._attach(self.first_tab())
            session = self.session
        else:
            session = self._sessions.get(tab) or self._attach(tab)
            self._sessions[tab] = session
        try:
            result = self.send("Runtime.evaluate", {"expression": expression,
                                                    "returnByValue": True}, session)
        except AssertionError as e:
            if NAVIGATED in str(e):
                return None  # the page was being replaced (a reload): no value yet
            raise
        return result.get("result", {}).get("value")

    def _attach(self, tab: str) -> str:
        return str(self.send("Target.attachToTarget",
                             {"targetId": tab, "flatten": True})["sessionId"])

    def first_tab(self) -> str:
        """The target id of the page Chromium opened with the browser."""
        targets = self.send("Target.getTargets")["targetInfos"]
        return str(next(t for t in targets if t["type"] == "page")["targetId"])

    def open_tab(self, url: str) -> str:
        """Another page (a tab of the same browser: same profile, so the same origin's Web
        Locks and BroadcastChannel); returns its target id for `evaluate` and `close_tab`."""
        return str(self.send("Target.createTarget", {"url": url})["targetId"])

    def close_tab(self, tab: str) -> None:
        """Close the page `tab` as a user closing it would (its unload runs, its locks go).
        Once the first page is closed this way, evaluate it only with `tab=`."""
        self.send("Target.closeTarget", {"targetId": tab})
        self._sessions.pop(tab, None)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        shutil.rmtree(self.profile, ignore_errors=True)


def trust_ca(home: Path, ca_pem: Path) -> dict[str, str]:
    """An NSS database under `home` (Chromium's `~/.pki/nssdb` on Linux) that trusts `ca_pem`
    for servers, made with NSS's certutil (Debian package libnss3-tools); returns the
    environment that points Chromium at it."""
    db = home / ".pki" / "nssdb"
    db.mkdir(parents=True)
    certutil = shutil.which("certutil")
    assert certutil, "certutil is needed (make test installs libnss3-tools)"
    subprocess.run([certutil, "-N", "-d", f"sql:{db}", "--empty-password"], check=True,
                   capture_output=True, timeout=30)
    subprocess.run([certutil, "-A", "-d", f"sql:{db}", "-t", "C,,", "-n", "ssekd test CA",
                    "-i", str(ca_pem)], check=True, capture_output=True, timeout=30)
    return {"HOME": str(home)}


def spki_pin(cert_pem: bytes) -> str:
    """The base64 SHA-256 of the certificate's public key (its SubjectPublicKeyInfo), as
    Chromium's `--ignore-certificate-errors-spki-list` takes it (`Browser(spki=...)`)."""
    der = x509.load_pem_x509_certificate(cert_pem).public_key().public_bytes(
        Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()
