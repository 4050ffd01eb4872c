"""Every relative link in the repository's Markdown documents leads somewhere: the file exists,
and a ``#section`` names a heading of the file it points to (GitHub's anchors). Documents move
(the README's sections to docs/, an investigation to a file of its own); a link left behind is
a reader's dead end.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def anchors(document: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation but ``-`` and
    ``_`` dropped, spaces made hyphens."""
    text = FENCE.sub("", document.read_text(encoding="utf-8"))
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#{1,6} (.+)$", text, re.M)
    }


def broken_links(document: Path) -> list[str]:
    """The relative links of ``document`` that lead nowhere, each as ``target``."""
    text = CODE.sub("", FENCE.sub("", document.read_text(encoding="utf-8")))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, section = target.partition("#")
        destination = (document.parent / path).resolve() if path else document
        if not destination.exists():
            broken.append(target)
        elif section and destination.suffix == ".md" and section not in anchors(destination):
            broken.append(target)
    return broken


def test_every_relative_link_in_the_documents_leads_somewhere():
    documents = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert documents
    broken = {name: links for name in documents if (links := broken_links(REPO / name))}
    assert not broken, broken


def test_a_missing_file_or_section_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## Writing a cell\n", encoding="utf-8")
    document = tmp_path / "doc.md"
    document.write_text(
        "[ok](other.md#writing-a-cell) [gone](moved.md) [section](other.md#hard-systems)\n"
        "[web](https://example.org) `[code](nowhere.md)`\n",
        encoding="utf-8",
    )
    assert broken_links(document) == ["moved.md", "other.md#hard-systems"]
