"""deploy/systemd/ssekd.service: `systemd-analyze verify` finds nothing to say about it (with its
commands pointed at this checkout's, which must exist for the check), `systemd-analyze security`
rates its exposure 2.0 or less, it carries what docs/deploying.md promises (Type=notify, KillMode=mixed,
a reload that checks the config first, the key store as a credential, memory limits, the
hardening), and its commands are ones twistd and `ssekd check` accept - the reload's check
failing for a config that cannot be used, so `systemctl reload` reports it."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ssekd.cli import main as ssekd_main
from ssekd.config.load import load_config
from ssekd.spi.plugins import discover
from ssekd.tap import Options
from tests.support.deploy import DEPLOY
from tests.support.pki import ENV, Pki, tls_config

UNIT = DEPLOY / "systemd" / "ssekd.service"
BIN = Path(sys.executable).parent


def service_section() -> dict[str, list[str]]:
    """The [Service] keys, each with all its values in order (ExecReload= comes twice)."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def here(command: str) -> list[str]:
    """A command of the unit with /opt/ssekd/bin pointing at this checkout's programs."""
    return [w.replace("/opt/ssekd/bin/", f"{BIN}/") for w in shlex.split(command)]


def local_unit(tmp_path: Path) -> Path:
    unit = tmp_path / "ssekd.service"
    unit.write_text(UNIT.read_text().replace("/opt/ssekd/bin/", f"{BIN}/"))
    return unit


def systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    assert tool is not None, "systemd-analyze (Debian package systemd) is needed"
    return tool


def test_the_unit_is_hardened_and_says_how_it_stops_and_reloads() -> None:
    service = service_section()
    single = {k: v[-1] for k, v in service.items()}
    assert single["Type"] == "notify" and single["NotifyAccess"] == "main"
    # the parent alone gets SIGTERM (it forwards it); SIGKILL to all at the stop timeout
    assert single["KillMode"] == "mixed"
    assert single["DynamicUser"] == "yes"
    assert single["NoNewPrivileges"] == "yes"
    assert single["ProtectSystem"] == "strict"
    assert int(single["LimitNOFILE"]) >= 65536
    name, _, source = single["LoadCredential"].partition(":")
    assert source.startswith("/etc/ssekd/") and name == Path(source).name
    assert f"${{{{ env.CREDENTIALS_DIRECTORY }}}}/{name}" in UNIT.read_text()
    high, top = (int(single[k].removesuffix("G")) for k in ("MemoryHigh", "MemoryMax"))
    assert 0 < high < top


def test_the_reload_checks_the_config_before_the_signal() -> None:
    reloads = service_section()["ExecReload"]
    assert len(reloads) == 2 and reloads[1] == "/bin/kill -HUP $MAINPID"
    check, start = here(reloads[0]), here(service_section()["ExecStart"][0])
    assert Path(check[0]).name == "ssekd" and check[1:3] == ["check", "--strict"]
    # the same config as the daemon's
    assert check[check.index("--config") + 1] == start[start.index("--config") + 1]


def test_the_command_is_one_twistd_accepts() -> None:
    command = shlex.split(service_section()["ExecStart"][0])
    assert Path(command[0]).name == "twistd"
    assert command[1:4] == ["--nodaemon", "--pidfile=", "ssekd"]
    options = Options()
    options.parseOptions(command[4:])
    assert options["workers"] == "auto"


def test_the_reload_check_fails_for_a_config_that_cannot_be_used(tmp_path: Path, pki: Pki,
                                                                 capsys: pytest.CaptureFixture[str]
                                                                 ) -> None:
    """The unit's reload check on a config naming its key store as the credential: good with
    the credential there, refused (exit 1, naming what is wrong) without it and for a broken
    config - so `systemctl reload` fails instead of reporting a reload the daemon refuses."""
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    shutil.copy(pki.keys, credentials / "localhost.p12")
    config, _, _ = tls_config(tmp_path, pki, "{keys: [localhost]}",
                              store="${{ env.CREDENTIALS_DIRECTORY }}/localhost.p12")  # type: ignore[arg-type]
    args = here(service_section()["ExecReload"][0])[1:]
    args[args.index("--config") + 1] = str(config)
    env = {**ENV, "CREDENTIALS_DIRECTORY": str(credentials)}
    with pytest.MonkeyPatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        assert ssekd_main(args) == 0
        m.delenv("CREDENTIALS_DIRECTORY")
        assert ssekd_main(args) == 1
    out = capsys.readouterr()
    assert "environment variable CREDENTIALS_DIRECTORY is not set" in out.out + out.err
    config.write_text(config.read_text().replace("kind: server", "kind: sever", 1))
    with pytest.MonkeyPatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        assert ssekd_main(args) == 1
    out = capsys.readouterr()
    assert re.search(rf"{re.escape(str(config))}:\d+: bindings\.", out.out + out.err)


def test_systemd_analyze_verify_has_nothing_to_say(tmp_path: Path) -> None:
    out = subprocess.run([systemd_analyze(), "verify", str(local_unit(tmp_path))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr


def test_systemd_analyze_rates_the_exposure_at_most_2(tmp_path: Path) -> None:
    unit = local_unit(tmp_path)
    out = subprocess.run([systemd_analyze(), "security", "--offline=true", "--threshold=20",
                          str(unit)], capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for ssekd\.service: (\d+\.\d)", out.stdout)
    assert m is not None, out.stdout + out.stderr
    assert float(m.group(1)) <= 2.0 and out.returncode == 0, out.stdout[-2000:]


def test_the_credential_is_the_key_store_the_production_config_names() -> None:
    """deploy/zilla.yaml, the config docs/deploying.md ("Copy and paste") installs as /etc/ssekd/zilla.yaml,
    finds its key store where the unit's LoadCredential= puts it."""
    name, _, _ = service_section()["LoadCredential"][-1].partition(":")
    credentials = "/run/credentials/ssekd.service"
    config = load_config(DEPLOY / "zilla.yaml", discover(), environ={
        "CREDENTIALS_DIRECTORY": credentials, "KEYSTORE_PASSWORD": "x",
        "KAFKA_BOOTSTRAP": "kafka:9092"})
    stores = [v.options["keys"]["store"] for v in config.vaults.values()]
    assert stores == [f"{credentials}/{name}"]
    start = here(service_section()["ExecStart"][0])
    assert start[start.index("--config") + 1] == "/etc/ssekd/zilla.yaml"
