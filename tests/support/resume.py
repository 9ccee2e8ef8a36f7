"""An SSE client that behaves like EventSource when its stream is cut: it connects again with
`Last-Event-ID` and goes on, keeping every event's data, so a test can check that a client
ended with every event exactly once whichever daemon or worker served each part."""

from __future__ import annotations

import time

from tests.support.sse import SseClient

#: Seconds between attempts to connect again (EventSource's default retry is 3 s; tests wait
#: less, the server side is what is being tested).
RECONNECT_DELAY = 0.1


class ResumingClient:
    """Reads one SSE path, resuming from the last id after every cut."""

    def __init__(self, port: int, path: str, timeout: float = 10.0) -> None:
        self.port = port
        self.path = path
        self.timeout = timeout
        self.last_id: str | None = None
        #: The data of every event received, markers included, in arrival order.
        self.data: list[str] = []
        #: How many times the stream was cut and opened again.
        self.reconnects = 0
        self.stream: SseClient | None = None
        self._connect(time.monotonic() + timeout)

    def _connect(self, deadline: float) -> None:
        headers = {"Last-Event-ID": self.last_id} if self.last_id is not None else None
        while True:
            try:
                stream = SseClient(self.port, self.path, headers, timeout=self.timeout)
            except (OSError, AssertionError, IndexError, ValueError):
                stream = None  # refused, reset, or cut before the headers: try again
            if stream is not None and stream.status == 200:
                self.stream = stream
                return
            if stream is not None:
                stream.close()
            if time.monotonic() > deadline:
                raise AssertionError(f"could not open {self.path} on port {self.port} again")
            time.sleep(RECONNECT_DELAY)

    def read_until(self, markers: list[str], timeout: float = 30.0) -> None:
        """Read (connecting again as needed) until every marker has arrived."""
        waiting = set(markers) - set(self.data)
        deadline = time.monotonic() + timeout
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"markers {sorted(waiting)} did not arrive at "
                                     f"{self.path} (last id {self.last_id}, "
                                     f"{self.reconnects} reconnects)")
            assert self.stream is not None
            e = self.stream.next_event(min(left, 1.0))
            if e is None:
                if self.stream.ended:
                    self.stream.close()
                    self.reconnects += 1
                    self._connect(deadline)
                continue
            if e.id is not None:
                self.last_id = e.id
            if e.data is not None:
                self.data.append(e.data)
                waiting.discard(e.data)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
