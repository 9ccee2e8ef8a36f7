"""The optional compiled twin of the hot path (ssekd/hotpath/build.py says how and why);
pyproject.toml holds everything else."""

import importlib.util
from pathlib import Path

from setuptools import setup

_spec = importlib.util.spec_from_file_location(
    "ssekd_hotpath_build", Path(__file__).parent / "ssekd" / "hotpath" / "build.py")
assert _spec is not None and _spec.loader is not None
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

setup(ext_modules=build.extensions(), cmdclass={"build_ext": build.optional_build_ext()})
