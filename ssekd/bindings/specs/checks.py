"""The request (or response) checks a spec-composed http binding carries: `options.requests`
entries in Zilla's shape, and the inline catalog `<binding>.requests` of their schemas beside
it. Each spec format fills the entries its own way; gathering and placing them is the same."""

from __future__ import annotations

from typing import Any

from ssekd.spi.compose import Composition, Where


class InlineChecks:
    """The `options.requests` entries of one composed http binding, gathered per operation,
    with the file and line of the part of the spec each comes from."""

    def __init__(self, binding: str) -> None:
        self.catalog = f"{binding}.requests"
        self.entries: list[dict[str, Any]] = []
        self.subjects: dict[str, dict[str, str]] = {}
        self.where: dict[int, Where] = {}

    def compose(self, options: dict[str, Any], composition: Composition,
                http_name: str) -> None:
        """Put the entries in the http binding's `options` and their catalog beside it."""
        if not self.entries:
            return
        options["requests"] = self.entries
        composition.catalogs[self.catalog] = {"type": "inline",
                                              "options": {"subjects": self.subjects}}
        for i, where in self.where.items():
            composition.where[("bindings", http_name, "options", "requests", i)] = where

    def summary(self, what: str) -> str:
        """What `ssekd check` says of them: `, N <what> check(s)`, or nothing."""
        return f", {len(self.entries)} {what} check(s)" if self.entries else ""
