"""The two implementations of the hot path (`ssekd.hotpath`): the pure module and its compiled
twin, for tests that run against each in turn.

`hot_path` is a fixture parametrized over both: it makes ssekd's in-process code use the one of
its parameter (every module that took a name from `ssekd.hotpath`, and the test module's own
`ProgressState`), so a test module whose `pytestmark` uses it runs every test twice. The twin
is there whenever `make setup` could build it: a missing twin fails these tests unless
`SSEKD_NO_COMPILER=1` says this machine has no C compiler (then they run on the pure one alone
and say so).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import ModuleType

import pytest

import ssekd.bindings.kafka.cache
import ssekd.bindings.kafka.history
import ssekd.bindings.kafka.message
import ssekd.bindings.kafka.subscription
import ssekd.bindings.kafka.tail
import ssekd.bindings.kafka.topic_log
import ssekd.event_ids
import ssekd.hotpath
from ssekd.hotpath import kernels as pure

#: The environment variable that says no C compiler (or Cython) is here to build the twin.
NO_COMPILER = "SSEKD_NO_COMPILER"


def compiled() -> ModuleType:
    """The compiled twin; a test failure when it is missing (unless `NO_COMPILER` is set)."""
    try:
        from ssekd.hotpath import _kernels_c  # type: ignore[attr-defined, unused-ignore]
    except ImportError as e:
        if os.environ.get(NO_COMPILER) == "1":
            pytest.skip(f"{NO_COMPILER}=1: no compiled twin of the hot path on this machine")
        pytest.fail(f"the hot path's compiled twin is not built ({e}): `make setup` builds it "
                    f"(python ssekd/hotpath/build.py), or set {NO_COMPILER}=1 where no C "
                    "compiler can")
    assert _kernels_c.COMPILED
    return _kernels_c  # type: ignore[no-any-return, unused-ignore]


def implementation(name: str) -> ModuleType:
    return pure if name == "pure" else compiled()


#: Where ssekd's modules hold a name taken from `ssekd.hotpath`.
_USERS = {
    "ProgressState": [ssekd.event_ids, ssekd.bindings.kafka.subscription,
                      ssekd.bindings.kafka.tail, ssekd.bindings.kafka.cache, ssekd.hotpath],
    "records_of_batch": [ssekd.bindings.kafka.message, ssekd.hotpath],
    "encode_plain": [ssekd.hotpath],
    "encode_filtered": [ssekd.hotpath],
    "observe_ages": [ssekd.hotpath],
    "within_bytes": [ssekd.bindings.kafka.message, ssekd.bindings.kafka.topic_log,
                     ssekd.bindings.kafka.history, ssekd.hotpath],
}


@pytest.fixture(params=["pure", "compiled"])
def hot_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
             ) -> Iterator[ModuleType]:
    impl = implementation(request.param)
    monkeypatch.setattr(ssekd.hotpath, "IMPL", impl)
    monkeypatch.setattr(ssekd.hotpath, "COMPILED", impl.COMPILED)
    for name, modules in _USERS.items():
        for module in modules:
            monkeypatch.setattr(module, name, getattr(impl, name))
    if hasattr(request.module, "ProgressState"):
        monkeypatch.setattr(request.module, "ProgressState", impl.ProgressState)
    yield impl
