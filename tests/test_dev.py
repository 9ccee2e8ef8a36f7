"""`make run`'s launcher: it asks the binding kinds what to start (`KindSpec.connects_to`,
`KindSpec.bootstrap_topics`), naming no binding type, so a plugin's kinds count the same; run
from a clean clone it says once, after the broker's lines, what to open and how to stop, and a
second one on the same ports says in one line why it cannot start."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest

from ssekd import asyncapi
from ssekd.config.load import load_config
from ssekd.dev.broker import free_port, port_open, stop_process
from ssekd.dev.launcher import (
    LINK_TOKEN_TTL,
    DaemonOutput,
    answers_ready,
    bootstrap_topics,
    http_kafka_lines,
    key_url_guards,
    local_servers,
)
from ssekd.spi.binding import BindingType, KindSpec
from ssekd.spi.connection import Connector
from ssekd.spi.plugins import Registry, discover
from tests.support.checkout import ROOT, Ports, clean_clone, venv_is_current
from tests.support.launched import launch
from tests.support.sse import SseClient
from tests.support.writes import request

CONFIG = """\
name: dev
bindings:
  cs: {type: kafka, kind: cache_server, options: {bootstrap: [a, b]}, exit: kc}
  cs2: {type: kafka, kind: cache_server, options: {bootstrap: [b, c]}, exit: kc2}
  kc: {type: kafka, kind: client, options: {servers: ["localhost:9092", "kafka.example:9092"]}}
  kc2: {type: kafka, kind: client, options: {servers: ["127.0.0.1:9092", "localhost:9093"]}}
  q0: {type: queue, kind: client, options: {at: "127.0.0.1:5672", topics: [d]}}
"""

QUEUE = BindingType("queue", {"client": KindSpec(
    role=Connector, build=lambda ctx, b: object(), options={"type": "object"},
    connects_to=lambda o: [(str(o["at"]).split(":")[0], int(str(o["at"]).split(":")[1]))],
    bootstrap_topics=lambda o: list(o["topics"]))})


def test_what_make_run_starts_comes_from_the_kinds(tmp_path: Path) -> None:
    real = discover()
    registry = Registry({**real.types, "queue": QUEUE})
    config_file = tmp_path / "zilla.yaml"
    config_file.write_text(CONFIG)
    config = load_config(config_file, registry, environ={})
    assert local_servers(config, registry) == [("127.0.0.1", 9092), ("127.0.0.1", 9093),
                                               ("127.0.0.1", 5672)], \
        "local ones only, localhost as 127.0.0.1, each once"
    assert bootstrap_topics(config, registry) == ["a", "b", "c", "d"]


# -- `make run` from a clean clone --------------------------------------------------------------


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, Ports]:
    ports = Ports.free()
    folder = clean_clone(tmp_path / "ssekd", ports)
    assert venv_is_current(folder), "make setup first: make run here must not install"
    return folder, ports


MAKE_RUN = ".venv/bin/python -m ssekd.dev --dev-broker --dev-tokens --config {config}"


@pytest.mark.daemon
@pytest.mark.timeout(120)
def test_make_run_says_what_to_open_once_it_serves(clone: tuple[Path, Ports]) -> None:
    """The ready block comes once, after the broker's lines (where it does not scroll away):
    the page, the stream, the https address with the CA to trust and the metrics page (which
    answers), then how to stop."""
    folder, ports = clone
    run = launch(MAKE_RUN.format(config="etc/zilla.yaml"), folder)
    try:
        out = run.wait_output("Ctrl-C stops")
        http, https = f"http://localhost:{ports[7114]}", f"https://localhost:{ports[7143]}"
        assert out.count("ssekd is serving etc/zilla.yaml. Open:") == 1
        block = out[out.index("ssekd is serving"):]
        metrics = f"http://localhost:{ports[7190]}/metrics"
        assert [line.split()[0] for line in block.splitlines()[1:5]] == \
            [f"{http}/", f"{http}/events", f"{https}/", metrics]
        assert f"{metrics}  the daemon's metrics, for Prometheus" in block
        with urllib.request.urlopen(metrics.replace("localhost", "127.0.0.1"), timeout=10) as r:
            assert b"stream_active_sent" in r.read()
        assert f"curl -N {http}/events" in block
        assert "(curl --cacert etc/tls/ca.pem)" in block
        assert "Ctrl-C stops ssekd, the development broker and the demo producer." in block
        assert out.index("BINDING_KAFKA_PARTITIONS_ASSIGNED events") < out.index(block)
        # said once a client is served: what a balancer asks answers ready already
        assert answers_ready(f"http://127.0.0.1:{ports[7114]}/health/ready")
        time.sleep(2)
        assert run.output().count("ssekd is serving") == 1, "said once"
    finally:
        status = run.interrupt()
    assert status == 0, run.output()[-3000:]
    assert not port_open("127.0.0.1", ports[9092]), "the development broker stopped too"
    assert "Traceback" not in run.output()


@pytest.mark.daemon
@pytest.mark.timeout(120)
def test_the_guarded_demo_link_comes_last_with_a_token_that_lives_minutes(
        clone: tuple[Path, Ports]) -> None:
    folder, ports = clone
    run = launch(MAKE_RUN.format(config="etc/zilla-jwt.yaml"), folder)
    try:
        out = run.wait_output("renew=")
        time.sleep(1)
        last = run.output().rstrip().splitlines()[-1].strip()
        assert last.startswith(f"http://localhost:{ports[7114]}/?token="), run.output()
        token = parse_qs(urlsplit(last).query)["token"][0]
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["exp"] - claims["iat"] == LINK_TOKEN_TTL >= 120
        assert "(needs a token)" in out
        assert "Ctrl-C stops ssekd, the token service, the development broker and the demo " \
               "producer." in out
    finally:
        assert run.interrupt() == 0, run.output()[-3000:]


@pytest.mark.daemon
@pytest.mark.timeout(120)
def test_a_second_make_run_says_the_port_is_in_use_in_one_line(
        clone: tuple[Path, Ports]) -> None:
    folder, ports = clone
    first = launch(MAKE_RUN.format(config="etc/zilla.yaml"), folder)
    try:
        first.wait_output("Ctrl-C stops")
        said = "is in use (another ssekd? a `make run` in another terminal?): stop it, or " \
               "change the port in etc/zilla.yaml"
        second = launch(MAKE_RUN.format(config="etc/zilla.yaml"), folder)
        assert second.wait(30) == 1
        taken = {ports[p] for p in (7114, 7143, 7190)}
        (line,) = second.output().strip().splitlines()
        assert line.startswith("ssekd.dev: port ") and line.endswith(said), line
        assert int(line.split()[2]) in taken
        # the daemon itself, started by hand on a taken port: the same line, before it logs
        # (the one getting-started quotes)
        daemon = launch(".venv/bin/twistd -n --pidfile= ssekd --config etc/zilla.yaml", folder)
        assert daemon.wait(30) == 1
        (line,) = daemon.output().strip().splitlines()
        assert line.startswith("ssekd: port ") and line.endswith(said), line
        assert int(line.split()[2]) in taken
        assert first.running()
    finally:
        assert first.interrupt() == 0


# -- the todo demo (etc/zilla-todo.yaml) ---------------------------------------------------------


def test_the_todo_demo_gets_its_command_service_instead_of_the_demo_producer() -> None:
    """etc/zilla-todo.yaml writes `task-commands` with replies on `task-replies` and consumes
    `task-snapshots`: `make run` starts ssekd.todo_service for the `task` topics, and the demo
    producer must not write to the topics the service owns."""
    from ssekd.dev.launcher import command_services

    registry = discover()
    todo = load_config(ROOT / "etc" / "zilla-todo.yaml", registry, environ={})
    assert command_services(todo, registry) == [("task", "task-replies")]
    assert bootstrap_topics(todo, registry) == ["task-replies", "task-snapshots"]
    plain = load_config(ROOT / "etc" / "zilla.yaml", registry,
                        environ={"KEYSTORE_PASSWORD": "x"})
    assert command_services(plain, registry) == []


def test_the_ready_block_says_what_each_write_path_does() -> None:
    """One line per http-kafka path, its methods grouped by what they do; the async location
    (a GET a write answers with) is left out."""
    registry = discover()
    todo = load_config(ROOT / "etc" / "zilla-todo.yaml", registry, environ={})
    [plain] = asyncapi.servers(todo)
    assert http_kafka_lines(todo, plain) == [
        ("/tasks", "POST: a record to task-commands, answered from task-replies"),
        ("/tasks/{id}", "PUT, DELETE: a record to task-commands, answered from task-replies; "
                        "GET: the latest value of task-snapshots")]


@pytest.mark.daemon
@pytest.mark.timeout(120)
def test_make_run_serves_the_todo_demo_with_its_command_service(
        clone: tuple[Path, Ports]) -> None:
    """`make run CONFIG=etc/zilla-todo.yaml` from a clean clone: the ready block names the page,
    the stream and the write paths; a POST through it is answered by the command service the
    launcher started (201 and a snapshot on the stream), and Ctrl-C stops all of it."""
    folder, ports = clone
    run = launch(MAKE_RUN.format(config="etc/zilla-todo.yaml"), folder)
    try:
        out = run.wait_output("Ctrl-C stops")
        http = f"http://localhost:{ports[7114]}"
        block = out[out.index("ssekd is serving etc/zilla-todo.yaml. Open:"):]
        assert [line.split()[:2] for line in block.splitlines()[1:5]] == [
            [f"{http}/", "the"], [f"{http}/tasks", "topic"], [f"{http}/tasks", "POST:"],
            [f"{http}/tasks/{{id}}", "PUT,"]]
        assert "Ctrl-C stops ssekd, the development broker and the todo command service." \
            in block
        assert "demo producer" not in out, "the service owns the todo topics"
        with SseClient(ports[7114], "/tasks") as stream:
            created = request(ports[7114], "POST", "/tasks", {"Idempotency-Key": "milk"},
                              b'{"title": "milk"}')
            assert created.status == 201, created
            assert created.headers["location"] == "/tasks/milk"
            snapshot = stream.next_event(10)
            assert snapshot is not None and json.loads(snapshot.data or "")["title"] == "milk"
    finally:
        status = run.interrupt()
    assert status == 0, run.output()[-3000:]
    assert not port_open("127.0.0.1", ports[9092]), "the development broker stopped too"
    assert "Traceback" not in run.output()
    assert "todo service: 1 commands applied" in run.output(), "the service stopped, cleanly"


# -- make run starts a development broker only when asked -----------------------------------------

DEV = """\
name: dev
bindings:
  tcp0: {{type: tcp, kind: server, options: {{host: 127.0.0.1, port: {port}}}, exit: http0}}
  http0: {{type: http, kind: server, exit: files_map}}
  files_map:
    type: http-filesystem
    kind: proxy
    routes: [{{when: [{{path: "/{{p}}"}}], exit: files, with: {{path: "${{params.p}}"}}}}]
  files: {{type: filesystem, kind: server, options: {{location: .}}}}
  cs: {{type: kafka, kind: cache_server, options: {{bootstrap: [demo]}}, exit: kc}}
  kc: {{type: kafka, kind: client, options: {{servers: ["127.0.0.1:{kafka}"]}}}}
"""


def run_dev(tmp_path: Path, *flags: str) -> tuple[int, str]:
    """Run `python -m ssekd.dev` until its daemon listens; returns the Kafka port and what the
    launcher said, with the launcher stopped again (its broker, if any, with it)."""
    port, kafka = free_port(), free_port()
    config = tmp_path / "zilla.yaml"
    config.write_text(DEV.format(port=port, kafka=kafka))
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "ssekd.dev", "--config", str(config),
                                     "--no-demo", *flags], stdout=out, stderr=subprocess.STDOUT,
                                    cwd=tmp_path)
    try:
        # Started, not merely listening: the daemon opens its port before its reactor runs, and
        # a SIGTERM in between would end it with the signal's status instead of 0.
        deadline = time.monotonic() + 30
        while "ENGINE_STARTED" not in log.read_text():
            assert launcher.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        broker_listened = port_open("127.0.0.1", kafka)
    finally:
        assert stop_process(launcher) == 0, log.read_text()
    return broker_listened, log.read_text()


def test_make_run_without_the_flag_never_starts_a_broker(tmp_path: Path) -> None:
    """A production host whose Kafka is briefly down must not get a fake, empty broker on the
    Kafka address: without `--dev-broker` the launcher says nothing listens and goes on."""
    broker_listened, said = run_dev(tmp_path)
    assert not broker_listened, said
    assert "nothing listens on 127.0.0.1:" in said and "--dev-broker" in said, said
    assert "development broker (tansu) on" not in said


def test_make_run_with_the_flag_starts_one_where_nothing_listens(tmp_path: Path) -> None:
    broker_listened, said = run_dev(tmp_path, "--dev-broker")
    assert broker_listened, said
    assert "development broker (tansu) on 127.0.0.1:" in said


def test_the_ready_block_waits_for_the_readiness_of_each_plain_port() -> None:
    """Partitions assigned is not yet served: the block also waits for `/health/ready`, which
    turns 200 once the bootstrap topics are loaded (on plain ports; TLS ones share the caches)."""
    registry = discover()
    config = load_config(ROOT / "etc" / "zilla.yaml", registry, environ={"KEYSTORE_PASSWORD": "x"})
    assert asyncapi.readiness_urls(config) == ["http://localhost:7114/health/ready"]
    del config.bindings["north_http_server"].options["health"]
    assert asyncapi.readiness_urls(config) == []


def test_the_ready_block_waits_for_the_guards_keys() -> None:
    """The guard's first line (its keys loaded, or not) comes before the ready block, so the
    guarded demo link stays the last line on a slow machine too."""
    registry = discover()
    config = load_config(ROOT / "etc" / "zilla-jwt.yaml", registry,
                         environ={"KEYSTORE_PASSWORD": "x"})
    assert key_url_guards(config) == ["jwt0"]
    plain = load_config(ROOT / "etc" / "zilla.yaml", registry, environ={"KEYSTORE_PASSWORD": "x"})
    assert key_url_guards(plain) == []

    class Silent:
        stdout = stderr = None

    output = DaemonOutput(Silent(), ["events"], ["jwt0", "other"])  # type: ignore[arg-type]
    output._note("example:south_kafka_client [26/Nov/2026:02:43:47 +0000] "
                 "BINDING_KAFKA_PARTITIONS_ASSIGNED events 0->3\n")
    assert not output.waiting and output.guards_waiting == {"jwt0", "other"}
    output._note("example:jwt0 [26/Nov/2026:02:43:47 +0000] GUARD_JWT_KEYS_LOADED 1 keys\n")
    output._note("example:other [26/Nov/2026:02:43:47 +0000] GUARD_JWT_KEYS_UNAVAILABLE x\n")
    assert output.guards_waiting == set()
