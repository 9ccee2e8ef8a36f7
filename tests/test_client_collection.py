"""The unit checks of the browser client's collection (www/ssekd-client/collection.js), run with
Node.js against a fake stream: keys from both key-form ids and from a JSON field or pointer,
tombstones, JSON or text values, onChange, the `caughtUp` promise and `isCaughtUp` across a
reconnect, one topic of a several-topic stream, close(). tests/e2e/client/test_collection.py
checks it in a browser against a daemon and broker."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parent / "data" / "client" / "collection_unit.mjs"


def test_collection_unit_checks() -> None:
    node = shutil.which("node")
    assert node, "Node.js is needed (make test installs it)"
    done = subprocess.run([node, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok ") == 7, done.stdout
