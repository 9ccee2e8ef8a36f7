"""Broken `options.requests` (the http server's and client's validation): each stops the daemon
before it listens, naming file, line, path and what was expected, as every config error does."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.config import ConfigError
from ssekd.engine import Engine
from tests.config.test_config_errors import GOOD

SERVER = "    type: http\n    kind: server\n"

# (id, the http server's options, line, path, words the message must contain)
CASES = [
    ("unknown-model", "requests: [{{path: /a, content: {{model: xml}}}}]", 14,
     "bindings.http0.options.requests[0].content.model", "expected one of 'string'"),
    ("nothing-to-check", "requests: [{{path: /a}}]", 14,
     "bindings.http0.options.requests[0]", "expected a path and what to check"),
    ("bad-method", "requests: [{{path: /a, method: FETCH, headers: {{x: string}}}}]", 14,
     "bindings.http0.options.requests[0].method", "expected one of 'GET'"),
    ("bad-range", "requests: [{{path: /a, params: {{query: {{n: {{model: int32, range: "
                  "'1..2'}}}}}}}}]", 14,
     "bindings.http0.options.requests[0].params.query.n.range", "expected a range such as [1,10)"),
    ("path-param-not-in-path", "requests: [{{path: '/a/{{id}}', params: {{path: "
                               "{{nid: int32}}}}}}]", 14,
     "bindings.http0.options.requests[0].params.path.nid",
     "expected a parameter of the path /a/{id}: it has id"),
    ("undefined-catalog", "requests: [{{path: /a, content: {{model: json, catalog: "
                          "{{nope: [{{subject: s}}]}}}}}}]", 14,
     "bindings.http0.options.requests[0].content.catalog.nope", "catalog 'nope'"),
    ("two-schemas", "requests: [{{path: /a, content: {{model: json, catalog: "
                    "{{c: [{{subject: s}}, {{subject: t}}]}}}}}}]", 14,
     "bindings.http0.options.requests[0].content.catalog.c",
     "expected a list of exactly one schema"),
    ("bare-model-needing-a-catalog", "requests: [{{path: /a, content: json}}]", 14,
     "bindings.http0.options.requests[0].content", "expected one of 'string', 'int32'"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_issue_names_file_line_path_and_expectation(tmp_path: Path, case: tuple) -> None:
    _, options, line, path, words = case
    text = GOOD.replace(SERVER, SERVER + "    options:\n      " + options + "\n", 1)
    config = tmp_path / "zilla.yaml"
    config.write_text(text.format(port=7114))
    (tmp_path / "www").mkdir()
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    issue = caught.value.issues[0]
    assert (issue.file, issue.line, issue.path) == (config, line, path), str(caught.value)
    assert words in issue.message, str(caught.value)
