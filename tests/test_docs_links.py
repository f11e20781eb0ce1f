"""Every markdown link to a heading (`[text](file.md#anchor)`, `[text](#anchor)`) in the docs lands on
a heading that exists, by GitHub's anchor rule: docs get split and headings renamed, and a dead anchor
only shows as a page that opens at its top (as when docs/wave_model_evaluation.md was cut out of
docs/wave_model.md, with links pointing across both ways)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC_GLOBS = (
    "*.md",
    "docs/**/*.md",
    "jetson/**/*.md",
    "engines/**/*.md",
    "examples/**/*.md",
    "benchmarks/**/*.md",
)
LINK = re.compile(r"\]\(([^)\s#]*\.md)?#([^)\s]+)\)")
HEADING = re.compile(r"#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"\s*(```|~~~)")


def _prose(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    out, fence = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fence = not fence
        elif not fence:
            out.append((number, line))
    return out


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, -1, -2… on repeats."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose(text):
        if m := HEADING.match(line):
            kept = (c for c in m.group(1).lower() if c in " -_" or unicodedata.category(c)[0] in "LMN")
            slug = "".join(kept).replace(" ", "-")
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


def dead_anchors(doc: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for number, line in _prose(doc.read_text(encoding="utf-8")):
        for target, anchor in LINK.findall(line):
            dest = (doc.parent / target) if target else doc
            if not dest.is_file() or anchor not in anchors(dest.read_text(encoding="utf-8")):
                problems.append(f"{doc.relative_to(root)}:{number}: {target}#{anchor}")
    return problems


def test_every_heading_link_in_the_docs_resolves() -> None:
    docs = sorted({p for pattern in DOC_GLOBS for p in ROOT.glob(pattern)})
    assert any(p.name == "wave_model_evaluation.md" for p in docs)
    assert [p for doc in docs for p in dead_anchors(doc)] == []


def test_a_dead_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# B\n## Calibrating a Jetson (`--remote USER@HOST`)\n## Notes\n## Notes")
    doc = tmp_path / "a.md"
    doc.write_text(
        "[ok](b.md#calibrating-a-jetson---remote-userhost) [ok](b.md#notes-1) [ok](#a)\n"
        "```\n# not a heading\n```\n"
        "# A\n[dead](b.md#calibrating-a-jetson) [dead](#not-a-heading) [dead](c.md#x)\n"
    )
    assert dead_anchors(doc, tmp_path) == [
        "a.md:6: b.md#calibrating-a-jetson",
        "a.md:6: #not-a-heading",
        "a.md:6: c.md#x",
    ]
