"""The unit checks of the browser client's stream (www/ssekd-client/stream.js), run with Node.js
against a scripted transport: the SSE parser's rules (fields, multi-line data, comments,
`retry:`, CR/LF/CR LF split across reads, a BOM), resume from storage as ?lastEventId= and
Last-Event-ID, the full-jitter backoff with the server's retry: as base, what each status does,
one token refresh on 401/403, the challenge's renewal POST, topic routing, a throwing handler,
and nothing logged. tests/e2e/client/test_stream.py runs it in a browser against a daemon."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parent / "data" / "client" / "stream_unit.mjs"


def test_stream_unit_checks() -> None:
    node = shutil.which("node")
    assert node, "Node.js is needed (make test installs it)"
    done = subprocess.run([node, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok ") == 9, done.stdout
