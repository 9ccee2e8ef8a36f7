"""Random and mutated PKCS#12 stores: `read_store` answers with entries or `StoreError` (which
the vault turns into a config error naming the file), never another exception; and the DER walk
that finds the extra key bags, which runs on a store `load_pkcs12` already accepted, gives up
only with the errors `read_store` expects of it. Mutations (flips, cuts, insertions, rewritten
length bytes) start from real stores: one key made with `cryptography`, several with keytool.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssekd.devcert import issue, make_ca, write_store
from ssekd.vaults import pkcs12
from ssekd.vaults.pkcs12 import StoreError, read_store
from tests.reliability.fuzzing import examples
from tests.tls.conftest import KEYTOOL, keytool_merge

PASSWORD = "fuzz-pw"
STALL = 0.100
#: What read_store catches from the walk (it then keeps the key load_pkcs12 found).
WALK_ERRORS = pkcs12.WALK_ERRORS


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    folder = tmp_path_factory.mktemp("p12")
    ca = make_ca()
    write_store(folder / "one.p12", "localhost", issue(ca, ["localhost"]), PASSWORD,
                extra=[("ca", ca.cert)])
    write_store(folder / "other.p12", "other", issue(ca, ["other.test"]), PASSWORD)
    found = [(folder / "one.p12").read_bytes()]
    if KEYTOOL is not None:
        keytool_merge(folder / "multi.p12", [folder / "one.p12", folder / "other.p12"], PASSWORD)
        found.append((folder / "multi.p12").read_bytes())
    return found


@st.composite
def mutations(draw: st.DrawFn, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "byte", "cut", "drop", "insert", "length"]))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte":
            data[i] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[i:]
        elif op == "drop":
            del data[i:i + draw(st.integers(1, 64))]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        else:  # a DER length byte: short, long form, indefinite, huge
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0x81, 0x82, 0x84, 0x88, 0xFF]))
    return bytes(data)


def test_mutated_and_random_stores(stores: list[bytes]) -> None:
    counts = {"entries": 0, "StoreError": 0}
    slowest = [0.0]

    @examples(2000, 20000)
    @given(st.data())
    def case(data: st.DataObject) -> None:
        base = data.draw(st.sampled_from(stores))
        raw = data.draw(st.one_of(mutations(base), st.binary(max_size=4096)))
        password = data.draw(st.sampled_from([PASSWORD, PASSWORD, None, "", "wrong"]))
        started = time.thread_time()
        try:
            read_store(raw, password)
            counts["entries"] += 1
        except StoreError:
            counts["StoreError"] += 1
        slowest[0] = max(slowest[0], time.thread_time() - started)

    case()
    print(f"\nPKCS#12 read_store: {sum(counts.values())} cases {counts}, slowest "
          f"{slowest[0] * 1000:.1f} ms of CPU")


def test_key_bag_walk_on_mutated_stores(stores: list[bytes]) -> None:
    counts = {"keys": 0, "gave up": 0}

    @examples(2000, 20000)
    @given(st.data())
    def case(data: st.DataObject) -> None:
        raw = data.draw(mutations(data.draw(st.sampled_from(stores))))
        try:
            list(pkcs12._key_bags(raw, PASSWORD.encode()))
            counts["keys"] += 1
        except WALK_ERRORS:
            counts["gave up"] += 1

    case()
    print(f"\nPKCS#12 key-bag walk: {sum(counts.values())} cases {counts}")
