"""deploy/systemd/ssekd.service: `systemd-analyze verify` finds nothing to say about it (with
ExecStart pointed at this checkout's twistd, which must exist for the check), it carries the
hardening the README promises, and its command is one twistd accepts."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ssekd.tap import Options
from tests.support.deploy import DEPLOY

UNIT = DEPLOY / "systemd" / "ssekd.service"


def service_section() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def test_the_unit_is_hardened() -> None:
    service = service_section()
    assert service["DynamicUser"] == "yes"
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert int(service["LimitNOFILE"]) >= 65536
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"


def test_the_command_is_one_twistd_accepts() -> None:
    command = shlex.split(service_section()["ExecStart"])
    assert Path(command[0]).name == "twistd"
    assert command[1:4] == ["--nodaemon", "--pidfile=", "ssekd"]
    options = Options()
    options.parseOptions(command[4:])
    assert options["workers"] == "auto"


def test_systemd_analyze_verify_has_nothing_to_say(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    assert tool is not None, "systemd-analyze (Debian package systemd) is needed"
    twistd = Path(sys.executable).with_name("twistd")
    unit = tmp_path / "ssekd.service"
    unit.write_text(UNIT.read_text().replace("/opt/ssekd/bin/twistd", str(twistd)))
    out = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr
