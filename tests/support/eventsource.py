"""An SSE client that follows a browser's EventSource rules for what ends a stream, so a test can
say how many browsers a server or a balancer would have lost:

- a `200` with `Content-Type: text/event-stream`: events are read; `retry:` sets the reconnection
  delay;
- that response ends, or the connection fails before any response: wait the reconnection delay,
  then connect again with `Last-Event-ID`;
- any other status or content type: the EventSource *fails* (`readyState` CLOSED) and never
  connects again. `failed` says why.
"""

from __future__ import annotations

import time

from tests.support.sse import SseClient

#: The reconnection delay before the server sends `retry:` (browsers use about 3 s; tests less).
DEFAULT_RETRY_MS = 500


class EventSourceClient:
    """One browser tab's EventSource on `path`, through `port`."""

    def __init__(self, port: int, path: str, timeout: float = 10.0) -> None:
        self.port = port
        self.path = path
        self.timeout = timeout
        self.retry_ms = DEFAULT_RETRY_MS
        self.last_id: str | None = None
        #: The data of every event received, in order.
        self.data: list[str] = []
        #: Responses that opened a stream, and connection attempts that got none.
        self.opens = 0
        self.network_errors = 0
        #: Why the EventSource gave up for good (a status or type a browser does not retry).
        self.failed: str | None = None
        #: The `retry:` values seen, in order.
        self.retries: list[int] = []
        self.stream: SseClient | None = None
        self._connect(time.monotonic() + timeout)

    def _connect(self, deadline: float) -> None:
        while self.failed is None:
            headers = {"Last-Event-ID": self.last_id} if self.last_id is not None else None
            try:
                stream = SseClient(self.port, self.path, headers, timeout=self.timeout)
            except (OSError, AssertionError, IndexError, ValueError):
                self.network_errors += 1  # no response at all: EventSource tries again
            else:
                kind = next((v for k, v in stream.headers.items()
                             if k.lower() == "content-type"), "")
                if stream.status == 200 and kind.split(";")[0].strip() == "text/event-stream":
                    self.stream = stream
                    self.opens += 1
                    return
                stream.close()
                self.failed = f"{stream.status} {kind}"
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"could not reach {self.path} on port {self.port}")
            time.sleep(self.retry_ms / 1000.0)

    def read_until(self, markers: list[str], timeout: float = 30.0) -> None:
        """Read, reconnecting as EventSource would, until every marker arrived (or the
        EventSource failed for good, which the test then reports)."""
        waiting = set(markers) - set(self.data)
        deadline = time.monotonic() + timeout
        while waiting and self.failed is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"markers {sorted(waiting)} did not arrive at "
                                     f"{self.path} (last id {self.last_id}, {self.opens} opens)")
            assert self.stream is not None
            e = self.stream.next_event(min(left, 1.0))
            self._take_retry()
            if e is None:
                if self.stream.ended:
                    self.stream.close()
                    time.sleep(self.retry_ms / 1000.0)
                    self._connect(deadline)
                continue
            if e.id is not None:
                self.last_id = e.id
            if e.data is not None:
                self.data.append(e.data)
                waiting.discard(e.data)

    def _take_retry(self) -> None:
        assert self.stream is not None
        if self.stream.retry is not None:
            self.retry_ms = self.stream.retry
            self.retries.append(self.stream.retry)
            self.stream.retry = None

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
