"""A hostile or broken config file is refused with file and line, never a traceback, a hang or
unbounded memory: recursive and exponential aliases, deep nesting, environment values that
would change the file's structure, and random text (Hypothesis)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssekd.config.document import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES, parse_text, read_document
from ssekd.config.errors import ConfigError

FILE = Path("zilla.yaml")


def refused(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_text(text, FILE, environ or {})
    return str(caught.value)


def test_an_alias_that_contains_itself() -> None:
    assert refused("name: t\nbindings: &b {x: *b}\n") == \
        "zilla.yaml:2: bindings.x: an alias that contains itself"
    assert refused("a: &x [1, *x]\n") == "zilla.yaml:1: a[1]: an alias that contains itself"


def test_aliases_that_expand_exponentially() -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    message = refused("\n".join(lines) + "\n")
    assert f"more than {MAX_VALUES} values once aliases are expanded" in message
    assert message.startswith("zilla.yaml:")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 400, 5000])
def test_deep_nesting(depth: int) -> None:
    assert f"values nested more than {MAX_DEPTH} deep" in refused("a: " + "[" * depth +
                                                                   "]" * depth + "\n")


def test_nesting_and_aliases_within_bounds_are_fine() -> None:
    text = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\nb: &b {c: 1}\nd: *b\n"
    assert parse_text(text, FILE, {}).data["d"] == {"c": 1}


@pytest.mark.parametrize(("text", "value", "expected"), [
    ("port: ${{ env.V }}\n", "7114", {"port": 7114}),            # typed as if typed in
    ("port: \"${{ env.V }}\"\n", "7114", {"port": "7114"}),      # quoted stays text
    ("tls: ${{env.V}}\n", "true", {"tls": True}),
    ("port: 70${{ env.V }}\n", "14", {"port": 7014}),
    ("password: ${{ env.V }}\n", "a\nadmin: true", {"password": "a\nadmin: true"}),
    ("o: {password: ${{ env.V }}}\n", "x, admin: true}", {"o": {"password": "x, admin: true}"}}),
    ("password: ${{ env.V }}\n", "x # not a comment", {"password": "x # not a comment"}),
    ("# ${{ env.UNSET }} in a comment\na: 1\n", "", {"a": 1}),
])
def test_environment_values_never_change_the_structure(text: str, value: str,
                                                         expected: dict[str, object]) -> None:
    assert parse_text(text, FILE, {"V": value}).data == expected


@pytest.mark.parametrize(("text", "words"), [
    ("a: !!python/object:os.system x\n", "could not determine a constructor for the tag"),
    ("a: !0\n", "could not determine a constructor for the tag '!0'"),
    ("a: 2001-13-45\n", "month must be in 1..12"),
    ("a: !!int x\n", "invalid literal for int()"),
])
def test_tags_and_impossible_values(text: str, words: str) -> None:
    message = refused(text)
    assert message.startswith("zilla.yaml:1: a: YAML: ") and words in message, message


def test_a_huge_file_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "zilla.yaml"
    with big.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(ConfigError) as caught:
        read_document(big, {})
    assert str(caught.value) == f"{big}: <root>: cannot read config: {MAX_FILE_BYTES + 1} bytes; " \
                                f"expected at most {MAX_FILE_BYTES}"


def test_an_unset_variable_names_its_line_and_path() -> None:
    assert refused("a: 1\nb: {c: \"${{ env.NOPE }}\"}\n") == \
        "zilla.yaml:2: b.c: environment variable NOPE is not set"


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#%@`,? \n\t0123456789$.<=")),
               max_size=200))
def test_random_text_is_data_or_a_config_error(text: str) -> None:
    try:
        parse_text(text, FILE, {})
    except ConfigError as e:
        assert all(i.file == FILE for i in e.issues)
