"""The unit checks of the browser client's modules, run with Node.js (tests/support/node.py)
against scripted fakes; tests/e2e/client/ runs each in a browser against a daemon and broker.

- stream.js (`stream_unit.mjs`, a scripted transport): the SSE parser's rules (fields,
  multi-line data, comments, `retry:`, CR/LF/CR LF split across reads, a BOM), resume from
  storage as ?lastEventId= and Last-Event-ID, the full-jitter backoff with the server's retry:
  as base, what each status does, one token refresh on 401/403, the challenge's renewal POST,
  topic routing, a throwing handler, and nothing logged.
- collection.js (`collection_unit.mjs`, a fake stream): keys from both key-form ids and from a
  JSON field or pointer, tombstones, JSON or text values, onChange, the `caughtUp` promise and
  `isCaughtUp` across a reconnect, one topic of a several-topic stream, close().
- writes.js (`writes_unit.mjs`, a scripted fetch): one idempotency key per write across its
  retries, jittered backoff, Retry-After honoured, no retry on a 4xx, one token renewal after a
  401, If-Match from the etag read or a key-form id, a 412 as a Conflict with the current
  value, an async write followed to its location, and nothing logged.

Each script prints `ok <check>` per check that passed and exits non-zero on the first failure;
the count makes a script that stopped early, or lost a check, fail too."""

from __future__ import annotations

import pytest

from tests.support.node import run_node


@pytest.mark.parametrize(("script", "checks"), [
    ("stream_unit.mjs", 9), ("collection_unit.mjs", 7), ("writes_unit.mjs", 9)])
def test_the_modules_unit_checks(script: str, checks: int) -> None:
    out = run_node(script)
    print(out)
    assert out.count("ok ") == checks, out
