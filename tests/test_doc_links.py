"""The README is a short tour that sends its reader to docs/ and bench/README.md for the rest:
every link between those pages leads somewhere (the file exists, and a `#anchor` is a heading
of it as GitHub names headings), the README links every page of docs/, and no page points at a
path of the machine it was written on.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = (README, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: The README's own limit: it is the first screen and a tour, the rest is in docs/.
README_LINES = 300

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```.*?^\s*```", re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of `page`'s headings; a repeated one gets `-1`, `-2` ... as on GitHub."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    seen: Counter[str] = Counter()
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        a = anchor(heading)
        found.add(a if not seen[a] else f"{a}-{seen[a]}")
        seen[a] += 1
    return frozenset(found)


def links(page: Path) -> list[str]:
    """The relative links of `page` (outside code blocks), in order."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def broken(page: Path) -> list[str]:
    out = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            out.append(f"{page.relative_to(ROOT)}: {target}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            out.append(f"{page.relative_to(ROOT)}: {target}: no heading #{fragment}")
    return out


def test_every_link_between_the_pages_leads_somewhere() -> None:
    assert sum(len(links(p)) for p in PAGES) > 150
    problems = [b for page in PAGES for b in broken(page)]
    assert problems == [], "\n".join(problems)


def test_the_readme_is_a_tour_that_links_every_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < README_LINES
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    pages = [p for p in PAGES if p != README]
    missing = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked]
    assert missing == [], f"the README does not link {missing}"
    # it starts with the two commands
    first = re.findall(r"^```\w+\n(.+)$", text, re.MULTILINE)[:2]
    assert first[0] == "$ make run" and first[1].startswith("make test"), first


#: Paths of the machine the project was first written on (its checkouts and the notes beside
#: them), spelled in pieces so that this file is not itself a page that names them.
MACHINE_PATHS = ("/" + "work/", "../" + "shared")


def test_no_page_points_at_the_machine_it_was_written_on() -> None:
    for page in (*PAGES, ROOT / "CHANGELOG.md"):
        text = page.read_text(encoding="utf-8")
        assert not [p for p in MACHINE_PATHS if p in text], page


def test_anchor_is_githubs() -> None:
    assert anchor("Privileges: `--uid` and workers") == "privileges---uid-and-workers"
    assert anchor("TLS and HTTP/2") == "tls-and-http2"
    assert anchor("ssekd's additions to the Zilla config") == "ssekds-additions-to-the-zilla-config"
    assert anchor("Scale-out (`workers.py`)") == "scale-out-workerspy"
