"""`ssekd run` hands its options to twistd: the config, file watching and the workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ssekd import cli


def test_run_passes_watch_and_workers_to_twistd(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: calls.append((path, list(argv))))
    cli.main(["run", "--config", "z.yaml", "--watch", "--workers", "auto"])
    cli.main(["run"])
    twistd = str(Path(sys.executable).with_name("twistd"))
    assert calls == [
        (twistd, [twistd, "-n", "ssekd", "--config", "z.yaml", "--watch", "--workers", "auto"]),
        (twistd, [twistd, "-n", "ssekd", "--config", "etc/zilla.yaml"]),
    ]


def test_version_is_the_installed_packages() -> None:
    """`ssekd --version` and `twistd ssekd --version` say the version `ssekd_build_info`
    exports, which is the installed package's."""
    import subprocess
    from importlib.metadata import version

    import ssekd
    assert ssekd.__version__ == version("ssekd")
    bin_dir = Path(sys.executable).parent
    for command in ([str(bin_dir / "ssekd"), "--version"],
                    [str(bin_dir / "twistd"), "ssekd", "--version"]):
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert (out.returncode, out.stdout) == (0, f"ssekd {ssekd.__version__}\n"), out
