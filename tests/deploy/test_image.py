"""The container image (Containerfile), built by `make image`'s recipe and run as Kubernetes runs
it (deploy/kubernetes/ssekd.yaml): the Deployment's arguments, its config and key store mounted
from folders, a read-only root filesystem, uid 10001, the development broker on the host.
Streams flow over HTTP/1.1 and TLS with HTTP/2, the metrics port answers, a changed config
reloads, and SIGTERM drains: readiness 503 at once, the streams end after `engine.drain`, exit 0.

The config is deploy/zilla.yaml with this machine's differences only: loopback and
free ports instead of 0.0.0.0 and fixed ones (the container shares the host's network here), and
a drain of 3 s instead of 20. Skipped, saying why, only where the kernel runs no containers.
"""

from __future__ import annotations

import json
import re
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from ssekd.dev.broker import free_port
from tests.support import image as podman
from tests.support.broker import Kafka
from tests.support.deploy import DEPLOY
from tests.support.pki import PASSWORD, Pki
from tests.support.sse import SseClient
from tests.support.wait import wait_until

pytestmark = [pytest.mark.broker, pytest.mark.container]

TAG = "localhost/ssekd:test"
DRAIN = 3
#: An upper bound on the image's size, to notice it growing: 218 MB measured (Debian base 128 MB).
MAX_SIZE = 300_000_000


@pytest.fixture(scope="module")
def image() -> podman.Image:
    refusal = podman.kernel_refusal()
    if refusal is not None:
        pytest.skip(refusal)
    assert shutil.which("podman"), "podman is needed (make test installs it: DEBS)"
    return podman.build(TAG)


def deployment_container() -> dict[str, Any]:
    docs = yaml.safe_load_all((DEPLOY / "kubernetes" / "ssekd.yaml").read_text())
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def mounts(tmp: Path, ports: dict[int, int]) -> tuple[Path, Path]:
    """The ConfigMap's and the Secret's folders as the pod sees them."""
    text = (DEPLOY / "zilla.yaml").read_text()
    assert text.count("0.0.0.0") == 2 and "drain: 20" in text
    text = text.replace("0.0.0.0", "127.0.0.1").replace("drain: 20", f"drain: {DRAIN}")
    for deployed, here in ports.items():
        text = re.sub(rf"\b{deployed}\b", str(here), text)
    config = tmp / "config"
    (config / "schemas").mkdir(parents=True)
    (config / "zilla.yaml").write_text(text)
    shutil.copy(DEPLOY.parent / "etc" / "schemas" / "events.json", config / "schemas")
    return config, tmp / "tls"


def reading(seq: int) -> bytes:
    """A record of the demo topic that its JSON Schema (etc/schemas/events.json) accepts."""
    return json.dumps({"key": "image-test", "temperature": 20.5, "seq": seq,
                       "at": time.time()}).encode()


def ensure_topic(kafka: Kafka, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    if name not in admin.list_topics(timeout=10).topics:
        for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
            try:
                f.result(10)
            except Exception as e:  # created meanwhile by another test
                if "already exists" not in str(e).lower():
                    raise


def status(url: str, context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


@pytest.fixture
def container_name() -> Iterator[str]:
    name = f"ssekd-test-{uuid.uuid4().hex[:8]}"
    yield name
    podman.run("rm", "--force", "--time", "0", name, check=False)


def test_the_image_runs_the_kubernetes_deployment_read_only_and_drains_on_sigterm(
        image: podman.Image, kafka: Kafka, pki: Pki, tmp_path: Path,
        container_name: str, record_property: Callable[[str, object], None]) -> None:
    # shown at the end of `make test` (tests/conftest.py): the build's time and the image's size
    record_property("figure", f"container image {image.tag}: {image.size / 1e6:.0f} MB, "
                              f"built in {image.seconds:.0f} s ({image.parts})")
    assert image.size < MAX_SIZE, f"{image.size / 1e6:.0f} MB"
    started = time.monotonic()
    container = deployment_container()
    http, https, metrics = free_port(), free_port(), free_port()
    config, tls = mounts(tmp_path, {7114: http, 7143: https, 9090: metrics})
    tls.mkdir()
    shutil.copy(pki.keys, tls / "server.p12")
    (tls / "server.p12").chmod(0o644)  # the Secret's files are readable by the pod's uid
    ensure_topic(kafka, "events")
    env = {e["name"] for e in container["env"]}
    assert env == {"KAFKA_BOOTSTRAP", "KEYSTORE_PASSWORD"}
    paths = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}

    podman.run("run", "--detach", "--name", container_name, "--read-only", "--network", "host",
               *podman.ulimits(),
               "--volume", f"{config}:{paths['config']}:ro",
               "--volume", f"{tls}:{paths['tls']}:ro",
               "--env", f"KAFKA_BOOTSTRAP={kafka.bootstrap}",
               "--env", f"KEYSTORE_PASSWORD={PASSWORD}",
               image.tag, *container["args"])

    def logs() -> str:
        return podman.run("logs", container_name, check=False).stdout

    ready = f"http://127.0.0.1:{http}/health/ready"
    wait_until(lambda: status(ready) == 200, 60, what=lambda: f"not ready:\n{logs()}")
    assert podman.inspect(container_name, "{{.HostConfig.ReadonlyRootfs}}", "container") == "true"
    assert podman.run("exec", container_name, "id", "-u").stdout.strip() == "10001"
    denied = podman.run("exec", container_name, "touch", "/opt/ssekd/x", check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr
    # the image has no PySpark: its ssekd-spark script says so in one line
    spark = podman.run("exec", container_name, "ssekd-spark", "snapshot", "--topic", "events",
                       "--bootstrap", kafka.bootstrap, check=False)
    assert (spark.returncode, spark.stderr.strip()) == (
        1, "ssekd-spark needs the [spark] extra: pip install 'ssekd[spark]' (and Java 17+)")

    # streams: HTTP/1.1 on the http port, HTTP/2 over TLS on the https one
    stream = SseClient(http, "/events", timeout=20)
    assert stream.status == 200
    for seq in range(5):
        kafka.produce("events", reading(seq), key=b"image-test")
    kafka.flush()
    seen: list[int] = []
    while len(seen) < 5:
        event = stream.next_event(20)
        assert event is not None, f"events stopped after {seen}:\n{logs()}"
        data = json.loads(event.data or "{}")
        if data.get("key") == "image-test":
            seen.append(data["seq"])
    assert seen[-5:] == [0, 1, 2, 3, 4]
    curl = subprocess.run(["curl", "-sS", "--http2", "--cacert", str(pki.ca_pem), "-o",
                           "/dev/null", "-w", "%{http_code} %{http_version}",
                           f"https://localhost:{https}/health/ready"],
                          capture_output=True, text=True, timeout=30)
    assert curl.stdout == "200 2", curl.stderr
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as r:
        page = r.read().decode()
    active = [float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
              if line.startswith("stream_active_sent{")]
    assert sum(active) >= 1, page[:3000]
    # the image's wheel was built where a compiler is: its daemon runs the compiled hot path
    assert any(line.startswith("ssekd_build_info{") and 'hotpath="compiled"' in line
               for line in page.splitlines()), page[:3000]

    # the config folder changes (as the kubelet swaps a ConfigMap's files): a reload, the new
    # config answers, the stream goes on
    assert status(f"http://127.0.0.1:{http}/asyncapi.yaml") == 200
    edited = (config / "zilla.yaml").read_text().replace("path: /asyncapi.yaml",
                                                         "path: /streams.yaml")
    (config / "zilla.tmp").write_text(edited)
    (config / "zilla.tmp").rename(config / "zilla.yaml")
    wait_until(lambda: logs().count("CONFIG_RELOADED") == 2, 20, what=logs)  # both workers
    assert status(f"http://127.0.0.1:{http}/streams.yaml") == 200
    kafka.produce("events", reading(5), key=b"image-test")
    kafka.flush()
    event = stream.next_event(20)
    assert event is not None and json.loads(event.data or "{}")["seq"] == 5, logs()

    # SIGTERM: out of the Service at once, the streams end after the drain, exit 0
    stopped = time.monotonic()
    podman.run("kill", "--signal", "TERM", container_name)
    wait_until(lambda: status(ready) == 503, 5, what=lambda: f"still ready:\n{logs()}")
    while stream.next_event(DRAIN + 10) is not None:
        pass
    assert stream.ended, "the stream did not end"
    ended = time.monotonic() - stopped
    code = podman.run("wait", container_name, timeout=DRAIN + 30).stdout.strip()
    assert code == "0", logs()
    assert DRAIN - 0.5 <= ended <= DRAIN + 5, f"{ended}\n{logs()}"
    out = logs()
    assert "ENGINE_DRAINING" in out and "Traceback" not in out
    assert "Unable to write to plugin cache" not in out, "dropin.cache was not made at build"
    record_property("figure", f"container image {image.tag}: run read-only, streamed, reloaded "
                              f"and drained to exit 0 in {time.monotonic() - started:.0f} s")
