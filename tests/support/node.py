"""Node.js for the browser client's unit checks (tests/data/client/*.mjs): the modules of
www/ssekd-client/ are plain ES modules, so Node runs them against scripted fakes (a transport,
a fetch, a stream, Web Locks) faster and more exactly than a browser can."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CLIENT_DATA = Path(__file__).resolve().parents[1] / "data" / "client"


def run_node(script: str, *args: str) -> str:
    """What `node tests/data/client/<script> args...` prints; its failure fails the test with
    what it printed."""
    node = shutil.which("node")
    assert node, "Node.js is needed (make test installs it)"
    done = subprocess.run([node, str(CLIENT_DATA / script), *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
