"""A rotated key store applies with `--watch`, as Kubernetes delivers it: the kubelet writes a
Secret's new contents into a fresh folder and swaps the `..data` symlink the file's own symlink
points through. The daemon reloads on its own (the config file did not change) and new
handshakes get the new certificate; connections open before keep theirs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from ssekd.dev.certs import issue, make_ca, write_store
from tests.support.daemon import start_daemon
from tests.support.pki import PASSWORD, Pki, run, s_client, subject, tls_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon]


def swap_in(folder: Path, version: str, store: Path) -> None:
    """The kubelet's atomic update of a Secret mounted as a folder: `..<version>/server.p12`,
    then `..data` repointed at it by a rename (`server.p12 -> ..data/server.p12` stays)."""
    fresh = folder / f"..{version}"
    fresh.mkdir()
    (fresh / "server.p12").write_bytes(store.read_bytes())
    link = folder / "..data_tmp"
    link.symlink_to(fresh.name)
    os.replace(link, folder / "..data")


@pytest.mark.parametrize("workers", [1, 2])
def test_watch_reloads_a_key_store_swapped_in_like_a_kubernetes_secret(tmp_path: Path, pki: Pki,
                                                                        workers: int) -> None:
    """With workers the parent watches (as it is the one with `--watch`) and each worker
    reloads."""
    ca = make_ca("rotation CA")
    old, new = tmp_path / "old.p12", tmp_path / "new.p12"
    write_store(old, "server", issue(ca, ["localhost", "old.test"]), PASSWORD)
    write_store(new, "server", issue(ca, ["localhost", "new.test"]), PASSWORD)
    ca_pem = tmp_path / "ca.pem"
    ca_pem.write_bytes(ca.cert.public_bytes(Encoding.PEM))
    secret = tmp_path / "tls"
    secret.mkdir()
    swap_in(secret, "2026_11_25_1", old)
    (secret / "server.p12").symlink_to("..data/server.p12")

    config, tls_port, clear_port = tls_config(tmp_path, pki, "{}", store=secret / "server.p12")
    daemon = start_daemon(config, env={"KEYSTORE_PASSWORD": PASSWORD},
                          wait_ports=[tls_port, clear_port],
                          extra_args=["--watch", "--watch-interval", "0.2",
                                      "--workers", str(workers)])
    try:
        wait_until(daemon.workers_started, 20, what="the workers did not start")
        assert subject(s_client(tls_port, "-CAfile", str(ca_pem)).stdout) == "CN=localhost"
        before = s_client(tls_port, "-CAfile", str(ca_pem), "-showcerts").stdout
        assert "old.test" in _names(before)

        swap_in(secret, "2026_11_25_2", new)
        daemon.wait_output("CONFIG_RELOADED", count=workers, timeout=10)
        wait_until(lambda: "new.test" in _names(
            s_client(tls_port, "-CAfile", str(ca_pem)).stdout), 10,
            what=lambda: "the new certificate is not served")
        for _ in range(2 * workers):  # whichever worker answers
            assert "new.test" in _names(s_client(tls_port, "-CAfile", str(ca_pem)).stdout)
        assert daemon.output().count("CONFIG_RELOADED") == workers, "one change, one reload"
    finally:
        daemon.stop()


def _names(s_client_output: str) -> str:
    """The server certificate's subject alternative names, as `openssl x509` shows them."""
    pem = s_client_output[s_client_output.index("-----BEGIN CERTIFICATE-----"):
                          s_client_output.index("-----END CERTIFICATE-----") + 25]
    return run(["openssl", "x509", "-noout", "-ext", "subjectAltName"], input=pem.encode()).stdout
