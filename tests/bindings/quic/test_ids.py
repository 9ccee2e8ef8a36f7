"""Connection ids and the workers that share a QUIC port: the kernel hands each datagram to the
socket its destination id's first byte says (`steering_program`), so every id a worker makes
(`Shard.new_id`) must say that worker, and every id a connection hands out must be one of them.
"""

from __future__ import annotations

import random
import select
import socket
from collections.abc import Sequence

from aioquic.buffer import Buffer  # type: ignore[attr-defined]
from aioquic.quic.packet import QuicPacketType, pull_quic_header
from hypothesis import given
from hypothesis import strategies as st

from ssekd.bindings.quic.ids import Shard
from ssekd.workers.sockets import datagram_socket, steer_by_connection_id, steering_program
from tests.bindings.quic.wire import Wire, clock, http_server, quic_server
from tests.support.http_fakes import GetOnly

# -- Shard -------------------------------------------------------------------------------------


@given(st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
       st.integers(1, 20))
def test_a_shards_new_ids_always_land_on_it(shard: tuple[int, int], length: int) -> None:
    count, index = shard
    mine = Shard(index, count)
    for _ in range(50):
        cid = mine.new_id(length)
        assert len(cid) == length
        assert cid[0] % count == index
        assert mine.owns(cid)
        assert not any(Shard(other, count).owns(cid) for other in range(count) if other != index)


def test_a_shards_first_bytes_cover_its_share_evenly() -> None:
    """Only the first byte is steered: the rest stay random, and the first byte takes every value
    of its share, not one (ids must stay unguessable)."""
    seen = {Shard(2, 3).new_id(8)[0] for _ in range(4000)}
    assert seen == {b for b in range(255) if b % 3 == 2}


# -- the steering program ------------------------------------------------------------------

def run_cbpf(program: Sequence[tuple[int, int, int, int]], packet: bytes) -> int:
    """A classic BPF interpreter for what a socket filter may use of it (Linux's
    `bpf_check_classic` set, as far as loads, jumps, arithmetic and returns go): the value the
    program returns for `packet`. A load past the end ends the program with 0, as the kernel's
    does."""
    a = x = 0
    pc = 0
    for _ in range(10_000):
        code, jt, jf, k = program[pc]
        cls = code & 0x07
        if cls in (0x00, 0x01):  # LD, LDX
            size, mode = code & 0x18, code & 0xE0
            width = {0x00: 4, 0x08: 2, 0x10: 1}[size]
            if mode == 0x00:  # IMM
                value = k
            elif mode in (0x20, 0x40):  # ABS, IND
                at = k + (x if mode == 0x40 else 0)
                if at + width > len(packet):
                    return 0
                value = int.from_bytes(packet[at:at + width], "big")
            elif mode == 0x80 and cls == 0x01 and size == 0x10:  # LDX MSH
                if k >= len(packet):
                    return 0
                value = (packet[k] & 0x0F) * 4
            else:
                raise AssertionError(f"load mode {code:#x}")
            if cls == 0x00:
                a = value
            else:
                x = value
        elif cls == 0x04:  # ALU
            operand = x if code & 0x08 else k
            op = code & 0xF0
            if op in (0x30, 0x90) and operand == 0:
                return 0  # the kernel refuses the program; at run time: 0
            a = {0x00: lambda: a + operand, 0x10: lambda: a - operand,
                 0x20: lambda: a * operand, 0x30: lambda: a // operand,
                 0x40: lambda: a | operand, 0x50: lambda: a & operand,
                 0x60: lambda: a << operand, 0x70: lambda: a >> operand,
                 0x80: lambda: -a, 0x90: lambda: a % operand,
                 0xA0: lambda: a ^ operand}[op]() & 0xFFFFFFFF
        elif cls == 0x05:  # JMP
            op = code & 0xF0
            operand = x if code & 0x08 else k
            if op == 0x00:
                pc += k
            else:
                taken = {0x10: a == operand, 0x20: a > operand, 0x30: a >= operand,
                         0x40: bool(a & operand)}[op]
                pc += jt if taken else jf
        elif cls == 0x06:  # RET
            return a if code & 0x18 == 0x10 else k
        else:
            raise AssertionError(f"instruction {code:#x}")
        pc += 1
    raise AssertionError("the program does not end")


def short_packet(cid: bytes, rest: int = 40) -> bytes:
    return bytes([0x40 | 0x01]) + cid + bytes(rest)


def long_packet(dcid: bytes, kind: int = 0, rest: int = 40) -> bytes:
    return bytes([0xC0 | kind << 4]) + (1).to_bytes(4, "big") + bytes([len(dcid)]) + dcid \
        + bytes([8]) + b"\x07" * 8 + bytes(rest)


def test_the_steering_program_picks_the_first_byte_of_the_destination_id() -> None:
    noise = random.Random(7)
    for count in (1, 2, 3, 4, 7, 8):
        program = steering_program(count)
        for _ in range(200):
            cid = noise.randbytes(8)
            want = cid[0] % count
            assert run_cbpf(program, short_packet(cid)) == want
            for kind in range(4):  # Initial, 0-RTT, Handshake, Retry: the same place
                assert run_cbpf(program, long_packet(cid, kind)) == want
        # cut short before the id: the first socket
        assert run_cbpf(program, b"") == 0
        assert run_cbpf(program, b"\x41") == 0
        assert run_cbpf(program, long_packet(b"")[:6]) == 0
        # each shard's ids land on that shard, in both header forms
        for index in range(count):
            cid = Shard(index, count).new_id(8)
            assert run_cbpf(program, short_packet(cid)) == index
            assert run_cbpf(program, long_packet(cid)) == index


def test_the_kernel_steers_datagrams_by_connection_id() -> None:
    """The program as the kernel runs it: three sockets in one SO_REUSEPORT group on 127.0.0.1,
    and each datagram reaches the socket its destination id says, whatever port it comes
    from."""
    count = 3
    first = datagram_socket("127.0.0.1", 0, reuse_port=True)
    port = first.getsockname()[1]
    group = [first, *(datagram_socket("127.0.0.1", port, reuse_port=True)
                      for _ in range(count - 1))]
    senders = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
    try:
        steer_by_connection_id(first, count)
        expected: list[list[bytes]] = [[] for _ in range(count)]
        for n in range(24):
            index = n % count
            cid = Shard(index, count).new_id(8)
            packet = short_packet(cid) if n % 2 else long_packet(cid)
            expected[index].append(packet)
            senders[n % len(senders)].sendto(packet, ("127.0.0.1", port))
        got: list[list[bytes]] = [[] for _ in range(count)]
        pending = sum(len(e) for e in expected)
        while pending:
            ready, _, _ = select.select(group, [], [], 2.0)
            assert ready, f"{pending} datagrams never came"
            for sock in ready:
                got[group.index(sock)].append(sock.recv(2048))
                pending -= 1
        assert [sorted(g) for g in got] == [sorted(e) for e in expected]
    finally:
        for s in (*group, *senders):
            s.close()


# -- a connection's ids --------------------------------------------------------------------

def test_every_id_a_connection_issues_is_owned_by_its_shard() -> None:
    c = clock()
    server = quic_server(c, http_server(c, GetOnly()))
    wire = Wire(server, c, shard=(2, 5))
    client = wire.connect()
    peer = next(iter(server.peers))
    shard = Shard(2, 5)
    issued: set[bytes] = set()

    def learn() -> None:
        quic = client.quic
        issued.add(quic._peer_cid.cid)  # noqa: SLF001 - what the client sends to
        issued.update(c.cid for c in quic._peer_cid_available)  # noqa: SLF001

    learn()
    assert len(issued) >= 2  # the first id and spares for migration
    for _ in range(12):  # more than aioquic's eight: the spares are made again
        client.quic.change_connection_id()
        stream = client.request()
        wire.run(0.1)
        assert client.status(stream) == b"200"
        learn()
    assert len(issued) > 12
    assert all(shard.owns(cid) for cid in issued), [cid.hex() for cid in issued]
    host = {c.cid for c in peer.quic._host_cids}  # noqa: SLF001
    assert all(shard.owns(cid) for cid in host)
    # the Retry's id (which the client's first packets went to) is the shard's too
    retry = pull_quic_header(Buffer(data=wire.sent[0][0]), host_cid_length=8)
    assert retry.packet_type == QuicPacketType.RETRY and shard.owns(retry.source_cid)
    # the server knows every id it still answers to, and none it retired
    assert set(server.by_id) == host | {retry.source_cid}
    assert set(server.by_id.values()) == {peer}
