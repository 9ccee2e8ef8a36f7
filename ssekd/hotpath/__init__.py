"""The hot path's implementation: the compiled twin of `ssekd.hotpath.kernels` when it was built
and is wanted, else `kernels` itself (plain Python, the same source).

Callers import from here, never from either module directly (tests do, to compare them).
`SSEKD_PURE_PYTHON=1` in the environment runs the pure path even where the twin is built: to
check the two agree on a real daemon, or to profile the Python lines the twin was made from.
`COMPILED` says which one this process runs (`python -c 'import ssekd.hotpath as h;
print(h.COMPILED)'` with the daemon's environment says which one it runs).
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType
from typing import TYPE_CHECKING

from ssekd.hotpath import kernels as _pure

#: What the rest of ssekd takes from the implementation.
_NAMES = ("RECORD_OVERHEAD", "ProgressState", "records_of_batch", "encode_plain",
          "encode_filtered", "observe_ages", "within_bytes")


def _load() -> ModuleType:
    if os.environ.get("SSEKD_PURE_PYTHON", "") not in ("", "0"):
        return _pure
    try:
        from ssekd.hotpath import _kernels_c  # type: ignore[attr-defined, unused-ignore]
    except ImportError:  # not built: no compiler or no Cython where it was installed
        return _pure
    if not all(hasattr(_kernels_c, name) for name in _NAMES):
        # a twin built from an older kernels.py (a checkout changed since `make` built it)
        warnings.warn("ssekd.hotpath: the compiled twin is older than kernels.py; running the "
                      "pure path (make setup, or python ssekd/hotpath/build.py, builds it)",
                      stacklevel=1)
        return _pure
    return _kernels_c  # type: ignore[no-any-return, unused-ignore]


#: The module this process runs: `ssekd.hotpath.kernels` or its compiled twin.
IMPL: ModuleType = _load()
#: Whether `IMPL` is the compiled twin.
COMPILED: bool = bool(IMPL.COMPILED)

# The compiled twin's classes and functions are its own (a ProgressState of one is not one of
# the other): everything is taken from the same module. mypy reads the pure module's types.
if TYPE_CHECKING:
    from ssekd.hotpath.kernels import (
        RECORD_OVERHEAD,
        ProgressState,
        encode_filtered,
        encode_plain,
        observe_ages,
        records_of_batch,
        within_bytes,
    )
else:
    RECORD_OVERHEAD = IMPL.RECORD_OVERHEAD
    ProgressState = IMPL.ProgressState
    records_of_batch = IMPL.records_of_batch
    encode_plain = IMPL.encode_plain
    encode_filtered = IMPL.encode_filtered
    observe_ages = IMPL.observe_ages
    within_bytes = IMPL.within_bytes

__all__ = ["COMPILED", "IMPL", "RECORD_OVERHEAD", "ProgressState", "encode_filtered",
           "encode_plain", "observe_ages", "records_of_batch", "within_bytes"]
