"""docs/architecture.md stays true: every `module.path:qualname` it names imports and resolves,
and every file of the project it names exists.

The page walks a request and a Kafka record through the code by function name. Modules are
renamed and split as the project grows; when one of these names goes, this test says which, so
the walk is brought along with the code instead of describing code that is no longer there.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: `ssekd.bindings.tcp:TcpServer.admit`: a module, a colon, a dotted name inside it.
_NAMED = re.compile(r"`(ssekd(?:\.\w+)*):(\w+(?:\.\w+)*)`")
#: A path in the layout or the text: `ssekd/engine.py`, `tests/support/`, `bench/baseline/`.
_PATH = re.compile(r"(?<![\w./-])((?:ssekd|tests|bench|deploy|etc|www|docs|twisted)/"
                   r"[\w./-]*[\w/])")
#: What `make run` makes on first run (the development key store), not a file of the clone.
MADE_BY_MAKE_RUN = ("etc/tls/", "etc/jwt/")


def named() -> list[tuple[str, str]]:
    """(module, qualname) for every name the page gives, in order, without repeats."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    return list(dict.fromkeys(_NAMED.findall(text)))


def resolve(module: str, qualname: str) -> str | None:
    """None when `module:qualname` exists, else what is missing."""
    try:
        target: object = importlib.import_module(module)
    except ImportError as e:
        return f"{module}: cannot import ({e})"
    walked = module
    for part in qualname.split("."):
        if not hasattr(target, part):
            return f"{module}:{qualname}: {walked} has no {part!r}"
        target = getattr(target, part)
        walked += f".{part}"
    return None


def test_the_page_walks_through_enough_code_to_mean_something() -> None:
    """The two walks and the start-up name the bindings' main functions; a page that lost them
    (a regular expression that no longer matches, say) would make the test below pass on
    nothing."""
    names = named()
    assert len(names) >= 80, len(names)
    text = ARCHITECTURE.read_text(encoding="utf-8")
    for heading in ("## Layout", "## A GET /events, from accept to the first event",
                    "## A Kafka record, from the consumer thread to every stream"):
        assert heading in text
    modules = {m for m, _ in names}
    for layer in ("ssekd.bindings.tcp", "ssekd.bindings.tls", "ssekd.bindings.http.server",
                  "ssekd.bindings.sse.server", "ssekd.bindings.sse_kafka.proxy",
                  "ssekd.bindings.kafka.cache", "ssekd.bindings.kafka.client",
                  "ssekd.bindings.kafka.tail", "ssekd.bindings.kafka.tail_consumer",
                  "ssekd.bindings.kafka.inbox", "ssekd.event_ids"):
        assert layer in modules, layer


def test_every_name_the_page_gives_exists() -> None:
    missing = [why for module, qualname in named()
               if (why := resolve(module, qualname)) is not None]
    assert missing == [], "docs/architecture.md names code that is not there:\n" + \
        "\n".join(missing)


def test_every_path_the_page_gives_exists() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    paths = sorted(set(_PATH.findall(text)))
    assert len(paths) >= 20, paths
    missing = [p for p in paths
               if not p.startswith(MADE_BY_MAKE_RUN) and not (ROOT / p).exists()]
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_resolve_says_what_is_missing() -> None:
    assert resolve("ssekd.event_ids", "ProgressState.advance") is None
    assert resolve("ssekd.event_ids", "ProgressState.nothing") == \
        "ssekd.event_ids:ProgressState.nothing: ssekd.event_ids.ProgressState has no 'nothing'"
    assert resolve("ssekd.no_such_module", "x") is not None
