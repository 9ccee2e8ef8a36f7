"""What `ssekd.hotpath.kernels` uses of the `cython` module, for when it runs as plain Python.

Cython reads `kernels.py` as source and turns these names into C declarations; the interpreter
running the same file needs only names that do nothing: no type is checked, no decorator
changes a function. Cython installs a module of the same role, but the pure path must work
where Cython is not installed (a wheel's runtime needs nothing of Cython), so this small one is
ours, and typed so mypy checks `kernels.py` the same whichever is present.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

#: False here; Cython sets it True in the compiled module (`ssekd.hotpath.COMPILED` reads it).
compiled = False

#: C integer types: plain ints in Python. Values that overflow them are not met here (Kafka
#: offsets and partitions are signed 64-bit).
Py_ssize_t = int
longlong = int
bint = bool
double = float

_T = TypeVar("_T")


def cclass(cls: _T) -> _T:
    """An extension type when compiled: fields in a C struct, methods called directly."""
    return cls


def ccall(func: _T) -> _T:
    """A method callable from C directly (cpdef) when compiled."""
    return func


def cfunc(func: _T) -> _T:
    """A C function when compiled (not visible from Python then)."""
    return func


def inline(func: _T) -> _T:
    return func


def final(cls: _T) -> _T:
    """No subclasses: compiled method calls need not look for overrides."""
    return cls


def annotation_typing(on: bool) -> Callable[[_T], _T]:
    """Whether Cython takes a function's annotations as C types (off: `cython.locals` does)."""
    def keep(func: _T) -> _T:
        return func
    return keep


def locals(**types: Any) -> Callable[[_T], _T]:  # noqa: A001 - the name Cython gives it
    """C types of a function's local variables when compiled."""
    def keep(func: _T) -> _T:
        return func
    return keep
