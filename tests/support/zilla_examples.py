"""Zilla's public examples (tests/data/zilla-examples/, aklivity/zilla `examples/` at the commit
named there), run on ssekd as published: the zilla service of each example's `compose.yaml`
gives the config (mounted from `etc/`, or inline in the compose file), the files it mounts
(key stores, pages, specs), its environment and its published ports; its `kafka-init` service
gives the topics to create. What changes, and nothing else:

- hosts: `0.0.0.0` becomes `127.0.0.1` (tests listen on loopback only), and the compose
  network's names (the broker's `kafka.examples.dev:29092`, a stand-in's host) the test's;
- ports: each published port becomes a free one, wherever the example's text names it;
- paths: what the container mounts (`/etc/zilla`, `/var/www`) lives in a folder of the test.

`Example.start` starts the daemon with that config, the example's environment and
`KAFKA_BOOTSTRAP_SERVER` set to the test's broker.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from ssekd.dev.broker import free_port
from tests.support.daemon import Daemon, start_daemon
from tests.support.data import DATA

EXAMPLES = DATA / "zilla-examples"
#: The commit of aklivity/zilla the examples were copied from.
COMMIT = "2f894347ccfcae2bf3d94ec40ce651dc552467ab"
#: Where Zilla reads its config in the example's container.
CONFIG = "/etc/zilla/zilla.yaml"
#: A topic the example's kafka-init creates: its name and its `--config` settings.
_CREATE = re.compile(r"--create\b(?P<args>[^\n;]*)")
_TOPIC = re.compile(r"--topic\s+(\S+)")
_SETTING = re.compile(r"--config\s+(\S+)=(\S+)")
_PARTITIONS = re.compile(r"--partitions\s+(\d+)")


@dataclass
class Example:
    """One example made runnable in `folder` (see the module docstring)."""

    name: str
    folder: Path
    #: The container port -> the port the test gives it.
    ports: dict[int, int]
    #: The zilla service's environment, the broker's address set.
    env: dict[str, str]
    #: name -> (partitions, topic settings) of the topics its kafka-init creates.
    topics: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    #: The test's broker, when the example has one.
    bootstrap: str | None = None
    daemon: Daemon | None = None

    @property
    def config(self) -> Path:
        return self.root(CONFIG)

    @property
    def source(self) -> Path:
        """The example as published (test data)."""
        return EXAMPLES / self.name

    def root(self, container_path: str) -> Path:
        """Where a path of the example's container is in the test's folder."""
        return self.folder / "root" / container_path.lstrip("/")

    def port(self, published: int) -> int:
        return self.ports[published]

    def create_topics(self) -> None:
        """The topics the example's kafka-init creates, on the test's broker."""
        if not self.topics or self.bootstrap is None:
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        made = admin.create_topics([NewTopic(name, partitions, 1, config=settings)
                                    for name, (partitions, settings) in self.topics.items()])
        for f in made.values():
            f.result(10)

    def start(self, extra_env: Mapping[str, str] | None = None,
              wait: bool = True) -> Daemon:
        self.daemon = start_daemon(self.config, env={**self.env, **(extra_env or {})},
                                   wait_ports=sorted(self.ports.values()) if wait else None)
        return self.daemon

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()


def prepare(name: str, folder: Path, bootstrap: str | None = None,
            hosts: Mapping[str, str] | None = None) -> Example:
    """Example `name` copied into `folder` and adapted (module docstring). `hosts` maps more
    `host:port` texts of the example (a stand-in service) to the test's."""
    source = EXAMPLES / name
    compose = yaml.safe_load((source / "compose.yaml").read_text(encoding="utf-8"))
    zilla = compose["services"]["zilla"]
    example = Example(name, folder, _ports(zilla.get("ports") or []), _environment(zilla))
    _mount(example, source, zilla, compose.get("configs") or {})
    example.topics = _topics(compose)
    replace: dict[str, str] = {}
    kafka = example.env.get("KAFKA_BOOTSTRAP_SERVER")
    example.bootstrap = bootstrap
    if bootstrap is not None:
        if kafka:
            replace[kafka] = bootstrap
        example.env["KAFKA_BOOTSTRAP_SERVER"] = bootstrap
    replace.update(hosts or {})
    _adapt(example.folder / "root", example.ports, replace)
    return example


def _ports(published: list[Any]) -> dict[int, int]:
    out = {}
    for item in published:
        container = int(str(item).rsplit(":", 1)[-1].split("/")[0])
        out[container] = free_port()
    return out


def _environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(str(e).split("=", 1) for e in env)
    return {str(k): str(v) for k, v in env.items()}


def _mount(example: Example, source: Path, service: Mapping[str, Any],
           configs: Mapping[str, Any]) -> None:
    """The container's files in the test's folder: its volumes, then its configs."""
    for volume in service.get("volumes") or []:
        local, target = str(volume).split(":")[:2]
        path = source / local
        destination = example.root(target)
        if path.is_dir():
            shutil.copytree(path, destination, dirs_exist_ok=True)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, destination)
    for item in service.get("configs") or []:
        entry = configs[item["source"]]
        destination = example.root(item["target"])
        destination.parent.mkdir(parents=True, exist_ok=True)
        if "content" in entry:
            # compose interpolates `${...}` in inline content; `$$` is how it spells a `$`
            destination.write_text(entry["content"].replace("$$", "$"), encoding="utf-8")
        else:
            shutil.copy(source / entry["file"], destination)


def _topics(compose: Mapping[str, Any]) -> dict[str, tuple[int, dict[str, str]]]:
    """The topics the example's kafka-init service creates."""
    init = compose["services"].get("kafka-init")
    if init is None:
        return {}
    command = init.get("command")
    text = "\n".join(command) if isinstance(command, list) else str(command or "")
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for m in _CREATE.finditer(text):
        args = m.group("args")
        topic = _TOPIC.search(args)
        if topic is None:
            continue
        partitions = _PARTITIONS.search(args)
        out[topic.group(1)] = (int(partitions.group(1)) if partitions else 1,
                               dict(_SETTING.findall(args)))
    return out


def _adapt(root: Path, ports: Mapping[int, int], replace: Mapping[str, str]) -> None:
    """Hosts, ports and mounted paths in every text file the daemon reads (the config, specs)."""
    for path in root.rglob("*"):
        if not path.is_file() or path.suffix not in (".yaml", ".yml", ".json"):
            continue
        text = path.read_text(encoding="utf-8")
        for old, new in replace.items():
            text = text.replace(old, new)
        text = re.sub(r"(host:\s*)0\.0\.0\.0\b", r"\g<1>127.0.0.1", text)
        for published, port in ports.items():
            text = re.sub(rf"(?<![\w.]){published}(?![\w.])", str(port), text)
        for mounted in ("/var/www", "/etc/zilla"):
            text = re.sub(rf"(?<![\w/]){re.escape(mounted)}(?=[/\s\"']|$)",
                          str(root / mounted.lstrip("/")), text, flags=re.MULTILINE)
        path.write_text(text, encoding="utf-8")
