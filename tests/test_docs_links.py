"""Every relative link in README.md and docs/**/*.md points to a file or folder that exists, and an
anchor into a markdown page (``page.md#heading``, or ``#heading`` in the same page) names one of its
headings as GitHub spells them. Code spans and fenced blocks are not links; web addresses are not checked."""
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def relative_links(page: Path) -> list[str]:
    """The link targets of ``page`` that name a place in the repository (no scheme)."""
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    targets = (m.group(1) for m in LINK.finditer(text))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the text of its links and code kept, lower case, every character
    but letters, marks, digits, connectors, spaces and hyphens dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = "".join(c for c in text if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of every heading of ``page`` (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return out


def problem(page: Path, target: str) -> str | None:
    """Why ``target`` (a relative link of ``page``) does not resolve, or None."""
    path, _, anchor = target.partition("#")
    place = page if not path else (page.parent / path)
    if not place.exists():
        return f"{target}: no such file"
    if anchor and place.suffix == ".md" and anchor not in anchors(place):
        return f"{target}: no heading #{anchor} in {place.name}"
    return None


def test_the_pages_are_found():
    assert (ROOT / "README.md") in PAGES and len(PAGES) > 10


def test_relative_links_are_found_in_a_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](b.md) [c](../d/e.md#f) [web](https://x.org) [anchor](#g)\n`[code](h.md)`\n"
                    "```\n[fenced](i.md)\n```\n![img](j.png \"title\")\n")
    assert relative_links(page) == ["b.md", "../d/e.md#f", "#g", "j.png"]


def test_anchors_are_spelled_as_github_spells_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Verification (`assocmem verify`)\n## ℓ1 retention: β, *retain*\n## Notes\n## Notes\n"
                    "```\n# not a heading\n```\n## See [docs](x.md) here\n")
    assert anchors(page) == {"verification-assocmem-verify", "ℓ1-retention-β-retain", "notes", "notes-1",
                             "see-docs-here"}
    assert problem(page, "#notes-1") is None and "no heading" in problem(page, "#not-a-heading")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    problems = [p for p in (problem(page, t) for t in relative_links(page)) if p]
    assert not problems, f"{page.relative_to(ROOT)}: {problems}"
