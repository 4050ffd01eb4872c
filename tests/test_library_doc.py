"""The library guide's examples (docs/library.md, "Use") run as written after the README's quick
start, and print what their comments say.

The quick start's files come from the quick preset itself (config/quick.yaml, unchanged),
limited to the targets the examples read: the NLTK sample's INN and its tagger file, and the
b = 0.5 walks (about 25 CPU-seconds of jobs). ``in.conllu`` stands for the reader's own file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from test_workflow import REPO, snakemake

GUIDE = REPO / "docs" / "library.md"
QUICK_TARGETS = ("results/taggers/pos/ptb_sample/inn/seed1/tagger.pt", "results/data/walks/b0.5/test.pt")

#: Runs one block of the guide statement by statement; a statement whose comment (on its line, or alone
#: on the next) is a Python literal must evaluate to it. Prints how many it checked.
HARNESS = r"""
import ast, io, sys, tokenize
source, first_line = sys.argv[1], int(sys.argv[2])
comments = {token.start[0]: (token.string[1:].strip(), token.line.strip().startswith("#"))
            for token in tokenize.generate_tokens(io.StringIO(source).readline) if token.type == tokenize.COMMENT}
namespace, checked = {"__name__": "__readme__"}, 0
for node in ast.parse(source).body:
    comment = comments.get(node.lineno, (None, False))[0]
    if comment is None and comments.get(node.end_lineno + 1, (None, False))[1]:
        comment = comments[node.end_lineno + 1][0]
    try:
        expected = ast.literal_eval(comment) if isinstance(node, ast.Expr) and comment else None
    except (ValueError, SyntaxError):
        expected = None
    if expected is None:
        exec(compile(ast.Module([node], []), "library.md", "exec"), namespace)
        continue
    value = eval(compile(ast.Expression(node.value), "library.md", "eval"), namespace)
    line = first_line + node.lineno - 1
    assert value == expected, f"library.md line {line}: {value!r}, the comment says {expected!r}"
    checked += 1
print(checked)
"""


def guide_blocks(language: str, section: str) -> list[tuple[int, str]]:
    """(first line number, text) of every ```language block in the guide's ``## section``."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end > 0 else None]
    offset = text[:start].count("\n") + 1
    return [
        (offset + body[: m.start(1)].count("\n"), m.group(1))
        for m in re.finditer(rf"```{language}\n(.*?)```", body, re.S)
    ]


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory, ewt_dir, nltk_data):
    """A folder as the quick start leaves it (for the examples' files), with a CoNLL-U file of the
    reader's own: the first 20 sentences of EWT's test file."""
    folder = tmp_path_factory.mktemp("quick")
    # the quick preset's NLTK folder, filled as its download would (tests never download)
    (folder / "resources/nltk_data/corpora").mkdir(parents=True)
    shutil.copy(nltk_data / "corpora/treebank.zip", folder / "resources/nltk_data/corpora/treebank.zip")
    result = snakemake(*QUICK_TARGETS, "--configfile", str(REPO / "config/quick.yaml"), workdir=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    blocks = (ewt_dir / "en_ewt-ud-test.conllu").read_text(encoding="utf-8").split("\n\n")[:20]
    (folder / "in.conllu").write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return folder


def test_the_library_blocks_are_found():
    blocks = guide_blocks("python", "Use")
    assert len(blocks) == 2 and "Tagger.load" in blocks[0][1] and "register(" in blocks[1][1]


def test_the_harness_fails_on_a_wrong_comment(tmp_path):
    """The check itself: a comment that is not what the line gives stops the block, naming the line."""
    source = "x = [1, 2]\nx + [3]   # [1, 2, 3]\nlen(x)\n          # 3\n"
    result = subprocess.run(
        [sys.executable, "-c", HARNESS, source, "10"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1 and "library.md line 12: 2, the comment says 3" in result.stderr


@pytest.mark.workflow
@pytest.mark.parametrize("index", [0, 1])
def test_the_library_examples_run_after_the_quick_start(quick_start, index):
    first_line, source = guide_blocks("python", "Use")[index]
    result = subprocess.run(
        [sys.executable, "-c", HARNESS, source, str(first_line)],
        cwd=quick_start,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    if index == 0:  # the tags it shows are checked: the quick tagger's
        assert int(result.stdout.split()[-1]) >= 1
