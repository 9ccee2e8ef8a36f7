"""What `pip install ssekd` puts on a machine, and the lock it is installed with.

- constraints.txt pins every requirement of pyproject.toml (every extra too) at a version the
  requirement allows, and this environment was installed from it (`make setup`), so CI tests
  the versions the image ships;
- the wheel installs no generic top-level names (a package called `spark` would collide with
  anything else of that name: the jobs are `ssekd.spark`), and carries its license,
  classifiers and project URLs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: The one top-level package; `twisted/plugins/` is Twisted's plugin folder, where a plugin
#: file must be to be found, named after us.
TOP_LEVEL = {"ssekd", "twisted"}


def pins() -> dict[str, Version]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not name==version"
            found[canonicalize_name(name)] = Version(version)
    return found


def requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    listed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        listed += extra
    listed += PYPROJECT["build-system"]["requires"]
    return [Requirement(r) for r in listed]


def test_the_lock_pins_every_requirement_at_a_version_it_allows() -> None:
    locked = pins()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in locked, f"{req} has no pin in constraints.txt (make lock)"
        assert req.specifier.contains(locked[name], prereleases=True), \
            f"constraints.txt pins {name}=={locked[name]}, outside {req}"


def test_this_environment_is_the_locked_one() -> None:
    """`make setup` installs with the lock; `make test-compat` too, but for Twisted, which it
    holds at the floor pyproject.toml allows."""
    floor = next(Version(str(s.version)) for s in next(
        r for r in requirements() if r.name.lower() == "twisted").specifier if s.operator == ">=")
    # setuptools and wheel: pinned for the wheel's build, which has an environment of its own
    build = {canonicalize_name(Requirement(r).name)
             for r in PYPROJECT["build-system"]["requires"]}
    differ = {}
    for name, version in pins().items():
        if name in build:
            continue
        installed = Version(metadata.version(name))
        if installed != version and not (name == "twisted" and installed == floor):
            differ[name] = f"{installed} installed, {version} locked"
    assert differ == {}, "not installed from constraints.txt (make setup)"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel .` builds of this checkout (its build backend as pyproject.toml
    asks for it, at the locked versions)."""
    out = tmp_path_factory.mktemp("wheel")
    # from a copy of what the Containerfile copies too: setuptools builds in the tree's build/
    # and would pack whatever an earlier build left there
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source)
    for name in ("ssekd", "twisted"):
        shutil.copytree(ROOT / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__", "dropin.cache"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out),
         str(source)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PIP_CONSTRAINT": str(ROOT / "constraints.txt")})
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("ssekd-*.whl")
    return built


def test_the_wheel_installs_only_ssekd_and_its_twistd_plugin(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if ".dist-info/" not in n]
    top = {n.split("/")[0] for n in names}
    assert top == TOP_LEVEL, f"top-level names besides ssekd: {sorted(top - TOP_LEVEL)}"
    under_twisted = sorted(n for n in names if n.startswith("twisted/"))
    assert under_twisted == ["twisted/plugins/ssekd_plugin.py"], under_twisted
    assert "ssekd/config/schema/zilla.json" in names and "ssekd/py.typed" in names


def test_the_wheel_says_its_license_classifiers_and_urls(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        (meta_name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        meta = Parser().parsestr(z.read(meta_name).decode())
        licenses = [n for n in z.namelist() if ".dist-info/licenses/" in n]
    assert meta["License-Expression"] == "Apache-2.0"
    assert [Path(n).name for n in licenses] == ["LICENSE"]
    classifiers = meta.get_all("Classifier") or []
    assert "Framework :: Twisted" in classifiers and "Typing :: Typed" in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(urls)
    assert meta["Requires-Python"] == ">=3.11"


def test_ssekd_spark_without_pyspark_says_which_extra_to_install() -> None:
    """The wheel installs the `ssekd-spark` script whatever the extras; without PySpark it says
    what to install, in one line, instead of a traceback."""
    block = "import sys; sys.modules.update(dict.fromkeys(['pyspark', 'pyarrow'], None)); "
    done = subprocess.run(
        [sys.executable, "-c", block + "from ssekd.spark.cli import main; "
         "sys.exit(main(['snapshot', '--topic', 'events', '--bootstrap', 'localhost:1']))"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == ("ssekd-spark needs the [spark] extra: pip install "
                                   "'ssekd[spark]' (and Java 17+)")
