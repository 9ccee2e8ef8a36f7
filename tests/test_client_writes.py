"""The unit checks of the browser client's writer (www/ssekd-client/writes.js), run with Node.js
against a scripted fetch: one idempotency key per write across its retries, jittered backoff,
Retry-After honoured, no retry on a 4xx, one token renewal after a 401, If-Match from the etag
read or a key-form id, a 412 as a Conflict with the current value, an async write followed to
its location, and nothing logged. tests/e2e/client/test_writes.py runs it in a browser against
a daemon."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parent / "data" / "client" / "writes_unit.mjs"


def test_writer_unit_checks() -> None:
    node = shutil.which("node")
    assert node, "Node.js is needed (make test installs it)"
    done = subprocess.run([node, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok ") == 9, done.stdout
