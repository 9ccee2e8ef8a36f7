"""Unit tests of `ssekd.patterns`: the one set of rules every binding's `when` and `with` use."""

from __future__ import annotations

import pytest

from ssekd.patterns import (
    Pattern,
    RequestValues,
    Unresolvable,
    guard_references,
    missing_captures,
    reference_problems,
    references,
    request_references,
    substitute,
    unknown_guards,
)


@pytest.mark.parametrize(("pattern", "value", "captures"), [
    ("/items", "/items", {}),
    ("/items", "/items/x", None),
    ("/{topic}", "/items", {"topic": "items"}),
    ("/{topic}", "/items/more", None),                       # a capture is one segment
    ("/{topic}", "/", None),                                 # of at least one character
    ("/{topic}/{key}", "/t/k", {"topic": "t", "key": "k"}),
    ("/events/*", "/events/a/b?x=1", {}),                    # * takes anything
    ("*.example.com", "www.example.com", {}),
    ("{host}:7114", "localhost:7114", {"host": "localhost"}),
    ("/a.b", "/aXb", None),                                  # literal text is literal
    ("/{x}-{x}", "/ab-ab", {"x": "ab"}),                     # a repeated name must agree
    ("/{x}-{x}", "/ab-cd", None),
])
def test_match(pattern: str, value: str, captures: dict[str, str] | None) -> None:
    assert Pattern.compile(pattern).match(value) == captures


@pytest.mark.parametrize(("pattern", "value", "captures"), [
    ("/{path}", "/css/app.css", {"path": "css/app.css"}),   # a last capture takes the rest
    ("/{path}", "/", {"path": ""}),                          # and may be empty (index.html)
    ("/{site}/{path}", "/a/b/c", {"site": "a", "path": "b/c"}),
    ("/{site}/{path}", "//b", None),                         # inner captures are as ever
])
def test_match_with_rest(pattern: str, value: str, captures: dict[str, str] | None) -> None:
    assert Pattern.compile(pattern, rest=True).match(value) == captures


def test_case_is_ignored_only_when_asked() -> None:
    assert Pattern.compile("*.Example.COM").match("www.example.com") is None
    assert Pattern.compile("*.Example.COM", ignore_case=True).match("www.example.com") == {}


def test_open_ended() -> None:
    assert Pattern.compile("/events/*").open_ended
    assert not Pattern.compile("/events/{x}").open_ended


def test_substitute_and_a_missing_value() -> None:
    assert substitute("topic-${params.t}", {"t": "a"}) == "topic-a"
    assert substitute("no references", {}) == "no references"
    with pytest.raises(Unresolvable, match="no path parameter t"):
        substitute("${params.t}", {})


def test_missing_captures_names_what_some_pattern_lacks() -> None:
    patterns = [Pattern.compile("/{topic}"), Pattern.compile("/{topic}/{key}")]
    assert missing_captures(["${params.topic}"], patterns) == []
    assert missing_captures(["${params.topic}", "${params.key}"], patterns) == ["key"]


def test_guarded_identity_is_substituted_by_the_same_function() -> None:
    template = "user-${guarded['jwt0'].identity}-${params.t}"
    assert references(template) == {"t"}
    assert guard_references(template) == {"jwt0"}
    assert substitute(template, {"t": "a"}, {"jwt0": "alice"}) == "user-alice-a"
    assert substitute('${guarded["jwt0"].identity}', {}, {"jwt0": "bob"}) == "bob"
    with pytest.raises(Unresolvable, match="no identity for guard jwt0"):
        substitute(template, {"t": "a"}, {})
    assert substitute("${guarded['jwt0\"].identity}", {}, {}) == \
        "${guarded['jwt0\"].identity}", "quotes that do not pair make no reference"


def test_unknown_guards_names_what_the_config_does_not_define() -> None:
    templates = ["${guarded['jwt1'].identity}", "${guarded['jwt0'].identity}", "${params.x}"]
    assert unknown_guards(templates, {"jwt0"}) == ["jwt1"]
    assert unknown_guards(templates, {"jwt0", "jwt1"}) == []


def test_request_values_are_the_clients_text_and_nothing_else() -> None:
    """`${headers.name}` (any case) and `${query.name}` (an ssekd addition, Zilla #1508): a
    value with a control character or bytes that were not UTF-8 (U+FFFD after decoding) is no
    value, nor is a query parameter that carries credentials."""
    values = RequestValues({"x-tenant": "acme", "x-bad": "a\nb", "x-nul": "a\x00",
                            "x-latin": "caf\ufffd"},
                           {"stream": "orders", "q": "a\rb", "access_token": "eyJ"},
                           frozenset({"access_token"}))
    template = "${headers.X-Tenant}.${query.stream}"
    assert request_references(template) == ({"x-tenant"}, {"stream"})
    assert substitute(template, {}, None, request=values) == "acme.orders"
    for bad, why in [("${headers.x-bad}", "control characters"),
                     ("${headers.x-nul}", "control characters"),
                     ("${headers.x-latin}", "not UTF-8"),
                     ("${headers.x-none}", "no header x-none"),
                     ("${query.q}", "control characters"),
                     ("${query.access_token}", "carries credentials"),
                     ("${query.none}", "no query parameter none")]:
        with pytest.raises(Unresolvable, match=why):
            substitute(bad, {}, None, request=values)
    with pytest.raises(Unresolvable, match="no request values here"):
        substitute("${headers.x-tenant}", {}, None)


def test_request_values_only_where_the_binding_takes_them_and_never_credentials() -> None:
    patterns = [Pattern.compile("/{topic}")]
    assert reference_problems(["${query.t}", "${headers.x-a}"], patterns, set(),
                              request_values=True) == []
    assert reference_problems(["${query.t}"], patterns, set()) == [
        "expected only `${params.name}` and `${guarded[...].identity}` here; "
        "`${headers...}` and `${query...}` are for sse-kafka routes"]
    for header in ("Authorization", "cookie", "Proxy-Authorization"):
        [problem] = reference_problems([f"${{headers.{header}}}"], patterns, set(),
                                       request_values=True)
        assert problem.startswith("expected a header that carries no credentials"), problem
        assert header.lower() in problem
