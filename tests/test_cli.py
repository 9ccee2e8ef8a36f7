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
