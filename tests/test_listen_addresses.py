"""Where the shipped configs listen.

The development configs (`etc/`) and what `make run` starts beside the daemon (`ssekd/dev/`: the
launcher, the development broker, the token service, the demo producer, the todo command
service) listen on loopback only. They carry a published TLS password and a token service that
signs any token asked for, and the todo demo's writes need no credentials: whoever reaches them
on the LAN could read, sign and write. The `localhost` URLs they print still work for a client
that tries `::1` first: it is refused there and goes on to 127.0.0.1.

The production configs (`deploy/`, and the `Containerfile` that carries one) listen where they
must, on every address (a container is reached on its own interface), and each such address has
a comment beside it that says so, and where to change it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.dev.broker import free_port, port_open, stop_process
from ssekd.dev.certs import DEV_PASSWORD, ensure_dev_store
from ssekd.engine import Engine
from ssekd.telemetry.events import EventLog
from tests.support.checkout import ROOT, Ports, clean_clone, venv_is_current
from tests.support.launched import launch
from tests.support.listening import descendants, is_loopback, listening
from tests.support.wait import wait_until

ETC = ROOT / "etc"
DEPLOY = ROOT / "deploy"
#: The daemon configs of etc/ (the rest there is Prometheus' and Grafana's).
DEV_CONFIGS = sorted(p.name for p in ETC.glob("*.yaml"))
#: Made by `make run` in a checkout, ignored by git: not shipped.
GENERATED = ("tls", "jwt")

#: A wildcard address in the text of a line: 0.0.0.0 (not a network such as 0.0.0.0/0), `::`
#: quoted or bracketed, or HAProxy's `bind :port` and `bind *:port`.
WILDCARD = re.compile(r"(?<![\d.])0\.0\.0\.0(?![\d./])|[\"'\[]::[\"'\]]|\bbind\s+\*?:\d")
#: What the comment beside a wildcard address says.
SAYS_SO = "every address"


def test_the_development_configs_are_all_there() -> None:
    """The parametrized test below runs once per config: none found would be no check."""
    assert {"zilla.yaml", "zilla-jwt.yaml", "zilla-todo.yaml", "zilla-relay.yaml"} <= \
        set(DEV_CONFIGS)


@pytest.mark.parametrize("name", DEV_CONFIGS)
def test_each_development_config_listens_on_loopback_only(tmp_path: Path, name: str) -> None:
    """Every socket the daemon would open for it, as the daemon builds them (a tcp server's
    `host`, its default when there is none, a prometheus exporter's endpoints): loopback."""
    etc = tmp_path / "etc"
    shutil.copytree(ETC, etc, ignore=shutil.ignore_patterns(*GENERATED))
    ensure_dev_store(etc / "tls", DEV_PASSWORD)  # as `make run` makes it
    engine = Engine(etc / name, reactor=MemoryReactorClock(), environ={},
                    events=EventLog("t"), print_events=False)
    assert engine.built is not None
    specs = [(s.host, s.port) for s in engine.built.listen_specs()]
    assert specs, "it listens somewhere"
    assert [s for s in specs if not is_loopback(s[0])] == [], f"{name} listens on {specs}"


def shipped_text_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not set(p.relative_to(folder).parts) & set(GENERATED)
                  and p.suffix != ".md")


def content(line: str) -> str:
    """A line without its `#` comment (every format here comments with `#`)."""
    return "" if line.lstrip().startswith("#") else line.split(" #", 1)[0]


def test_no_file_under_etc_names_a_wildcard_address() -> None:
    """Prometheus' scrape config and the dashboard included: nothing there listens on, or
    points at, every address."""
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in shipped_text_files(ETC)
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if WILDCARD.search(content(line))]
    assert found == []


def wildcards_unexplained(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, line) of each wildcard address whose comment (on its line, or the comment
    lines right above it, or above the run of such lines it is part of: HAProxy's two binds)
    does not say it is every address."""
    unexplained = []
    for i, line in enumerate(lines):
        if not WILDCARD.search(content(line)):
            continue
        said = line[len(content(line)):]
        above = i - 1
        while above >= 0 and (lines[above].lstrip().startswith("#")
                               or WILDCARD.search(content(lines[above]))):
            if lines[above].lstrip().startswith("#"):
                said = lines[above] + "\n" + said
            above -= 1
        if SAYS_SO not in " ".join(said.replace("#", " ").split()).lower():
            unexplained.append((i + 1, line.strip()))
    return unexplained


def test_the_check_of_the_deploy_comments_can_fail() -> None:
    assert wildcards_unexplained(["a:", "  # the pod's port", "  host: 0.0.0.0"]) == \
        [(3, "host: 0.0.0.0")]
    assert wildcards_unexplained(["bind :443 ssl", "bind 10.0.0.1:80"]) == [(1, "bind :443 ssl")]
    assert wildcards_unexplained(["# every address", "bind :80", "bind *:443 ssl", "x",
                                  "bind :8080"]) == [(5, "bind :8080")]
    assert wildcards_unexplained(["# on every address: reached from outside", "# more",
                                  "host: '::'", "from: [0.0.0.0/0]"]) == []


def test_each_wildcard_address_under_deploy_says_so_beside_it() -> None:
    files = [*shipped_text_files(DEPLOY), ROOT / "Containerfile"]
    found = {str(p.relative_to(ROOT)): wildcards_unexplained(p.read_text().splitlines())
             for p in files}
    assert {f: lines for f, lines in found.items() if lines} == {}
    # what there is to check: the daemon's config, HAProxy's binds, the Spark driver's
    assert sum(bool(WILDCARD.search(content(line)))
               for p in files for line in p.read_text().splitlines()) >= 6


# -- what `make run` starts, as the kernel sees it ----------------------------------------------

#: What `make run CONFIG=...` runs once the venv is made.
MAKE_RUN = ".venv/bin/python -m ssekd.dev --dev-broker --dev-tokens --config {config}"


@pytest.mark.daemon
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("config", "servers"), [
    ("etc/zilla-jwt.yaml", (7114, 7143, 9092, 7180)),  # daemon, broker, token service
    ("etc/zilla-todo.yaml", (7114, 9092)),  # daemon, broker (the command service listens not)
])
def test_make_run_and_all_it_starts_listen_on_loopback_only(
        tmp_path: Path, config: str, servers: tuple[int, ...]) -> None:
    """`make run` from a clean clone: every listening socket of its processes (the launcher,
    the daemon, the broker, the token service, the demo producer or the command service) is on
    loopback; and the `localhost` URLs it prints answer a client that tries `::1` first."""
    ports = Ports.free()
    folder = clean_clone(tmp_path / "ssekd", ports)
    assert venv_is_current(folder), "make setup first: make run here must not install"
    run = launch(MAKE_RUN.format(config=config), folder)
    try:
        out = run.wait_output("Ctrl-C stops", timeout=120)
        sockets = listening([run.process.pid, *descendants(run.process.pid)])
        assert {ports[p] for p in servers} <= {port for _, port in sockets}, sockets
        assert sorted(s for s in sockets if not is_loopback(s[0])) == [], sockets
        page = f"http://localhost:{ports[7114]}/"
        assert page in out
        urls = [page] + ([f"https://localhost:{ports[7143]}/"] if 7143 in servers else [])
        for url in urls:
            port = int(url.rsplit(":", 1)[1].strip("/"))
            answer = subprocess.run(
                ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-v", "--cacert",
                 str(folder / "etc" / "tls" / "ca.pem"), "--resolve",
                 f"localhost:{port}:[::1],127.0.0.1", url],
                capture_output=True, text=True, timeout=30)
            assert answer.stdout == "200", answer.stderr
            assert answer.stderr.index(f"Trying [::1]:{port}") < \
                answer.stderr.index(f"Connected to localhost (127.0.0.1) port {port}"), \
                answer.stderr
    finally:
        assert run.interrupt() == 0, run.output()[-3000:]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("helper", ["ssekd.dev.token_service", "ssekd.dev.broker"])
def test_a_development_helper_started_by_hand_listens_on_loopback(
        tmp_path: Path, helper: str) -> None:
    """Run as the docs show them, with only a port: their default address is loopback."""
    port = free_port()
    args = ["--key", str(tmp_path / "dev-key.pem")] if helper.endswith("token_service") else []
    process = subprocess.Popen([sys.executable, "-m", helper, *args, "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        wait_until(lambda: port_open("127.0.0.1", port), 30, what=lambda: f"{helper} on {port}")
        sockets = listening([process.pid, *descendants(process.pid)])
        assert port in {p for _, p in sockets}, sockets
        assert sorted(s for s in sockets if not is_loopback(s[0])) == [], sockets
    finally:
        # The broker's tansu runs in a session of its own, and a SIGTERM that comes before
        # the broker's handler is set (the port opens first) would leave it running.
        children = descendants(process.pid)
        stop_process(process)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
