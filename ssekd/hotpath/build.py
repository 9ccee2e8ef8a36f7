"""Building the compiled twin of `ssekd.hotpath.kernels`: `ssekd.hotpath._kernels_c`.

Used twice: by setup.py for a wheel (`pip install .`, the container image) and, as
`python ssekd/hotpath/build.py`, by the Makefile for the editable checkout (`make run`,
`make test`), where it puts the extension beside its source. Without Cython or a C compiler
neither fails: one line says the hot path runs as plain Python, which is the same code.

Kept free of ssekd imports, and run by its path: setup.py loads it before ssekd is installed,
and importing `ssekd.hotpath` would load the twin this is about to replace.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SOURCE = "ssekd/hotpath/kernels.py"
TWIN = "ssekd.hotpath._kernels_c"
ROOT = Path(__file__).resolve().parents[2]


_told: list[str] = []


def notice(why: str) -> None:
    """One line, once (a failed compile also fails the copy into the checkout after it)."""
    if not _told:
        _told.append(why)
        print(f"ssekd: {TWIN} not built ({why}): the hot path runs as plain Python",
              file=sys.stderr)


def extensions() -> list[Any]:
    """The twin's Extension, cythonized (the C file under build/cython, not beside the
    source); none when Cython is not installed."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        notice("Cython is not installed")
        return []
    from setuptools import Extension
    # -g0: no debugging symbols (1.4 MB of the module's 1.6 otherwise, in every wheel and image)
    return list(cythonize([Extension(TWIN, [SOURCE], extra_compile_args=["-g0"])],
                          build_dir="build/cython", quiet=True,
                          compiler_directives={"language_level": 3}))


def optional_build_ext() -> type:
    """setuptools' build_ext that leaves the twin out, with a notice, when compiling fails."""
    from setuptools.command.build_ext import build_ext

    class OptionalBuildExt(build_ext):  # type: ignore[misc]  # setuptools is untyped here
        def run(self) -> None:
            try:
                super().run()
            except Exception as e:  # noqa: BLE001 - any failure means: no compiled twin
                notice(f"no C compiler: {e}")

        def build_extension(self, ext: Any) -> None:
            try:
                super().build_extension(ext)
            except Exception as e:  # noqa: BLE001
                notice(f"compiling failed: {e}")

    return OptionalBuildExt


def build_in_place() -> int:
    """Compile the twin beside its source (the editable checkout). Reads no pyproject.toml, so
    the venv's own setuptools, whatever its version, does it."""
    import os

    from setuptools import Distribution
    os.chdir(ROOT)
    exts = extensions()
    if not exts:
        return 0
    dist = Distribution({"name": "ssekd-hotpath", "ext_modules": exts,
                         "cmdclass": {"build_ext": optional_build_ext()}})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.build_temp = "build/temp"
    dist.run_command("build_ext")
    return 0


if __name__ == "__main__":
    sys.exit(build_in_place())
