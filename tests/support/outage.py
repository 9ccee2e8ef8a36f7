"""A Kafka outage that keeps the data: the dev broker (tansu, memory only) behind a TCP switch
that can go down and come back on the same port.

Killing tansu would lose its topics (it keeps them in memory), so an outage is made in front of
it: the broker advertises the switch's address, every client (the daemons, the test's producer)
reaches it only through the switch, and `down()` cuts every connection and stops listening
(connections are refused, as for a broker that is gone) while the broker keeps its records.
`up()` listens again on the same port, and the clients reconnect by themselves.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from ssekd.dev.broker import free_port
from tests.support.broker import start_tansu, stop_tansu


class TcpSwitch:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target`, until `down()`."""

    def __init__(self, target: int, port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self.up()

    def up(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.settimeout(0.1)
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def down(self) -> None:
        """Stop listening and reset every connection: the broker is gone for its clients."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._accepting is not None:
            self._accepting.join(5)
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            try:  # a reset, as from a host that went away, not an orderly close
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                s.close()
            except OSError:
                pass

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            forget_and_close(self._lock, self._sockets, source, sink)


def forget_and_close(lock: threading.Lock, held: set[socket.socket],
                     *sockets: socket.socket) -> None:
    """Close the two sides of a relayed connection and take them out of `held` (a proxy's
    open sockets, which it closes itself when it goes down)."""
    for s in sockets:
        with lock:
            held.discard(s)
        try:
            s.close()
        except OSError:
            pass


@dataclass
class SwitchedBroker:
    """A tansu that its clients reach only through `switch` (its advertised address)."""

    process: subprocess.Popen[bytes]
    switch: TcpSwitch
    log: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.switch.port}"

    def stop(self) -> None:
        self.switch.down()
        stop_tansu(self.process)


def start_switched_broker(folder: Path) -> SwitchedBroker:
    port = free_port()
    switch_port = free_port()
    process, log = start_tansu(folder, port, switch_port)
    return SwitchedBroker(process, TcpSwitch(port, switch_port), log)
