"""Corpus readers: sizes on the shared corpora, an LDC-style copy made on the fly, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from inn.data.corpora import read_conllu, read_corpus, read_ewt, read_ptb, read_tagged, read_treebank_sample, read_wsj, write_tagged
from inn.errors import InnError


def _sizes(splits):
    return {k: (len(v), sum(map(len, v))) for k, v in splits.items()}


def test_ewt_sizes_equal_spec(ewt_dir):
    assert _sizes(read_ewt(ewt_dir)) == {
        "train": (12_544, 204_577), "dev": (2_001, 25_147), "test": (2_077, 25_094)}


def test_ewt_skips_multiword_ranges_and_keeps_ptb_tags(ewt_dir):
    train = read_conllu(ewt_dir / "en_ewt-ud-train.conllu")
    text = (ewt_dir / "en_ewt-ud-train.conllu").read_text(encoding="utf-8")
    ranges = sum(1 for line in text.splitlines() if line and line.split("\t")[0].count("-") == 1
                 and not line.startswith("#"))
    assert ranges > 0  # EWT has contractions like "don't" = do + n't
    words = [w for s in train for w, _ in s]
    assert "n't" in words and "don't" not in {w.lower() for w in words}
    tags = {t for s in train for _, t in s}
    assert {"NN", "NNP", "VBZ", "-LRB-", "."} <= tags


def test_treebank_sample_sizes_equal_spec(nltk_data):
    splits = read_treebank_sample(nltk_data)
    assert _sizes(splits) == {"train": (3_068, 73_842), "dev": (433, 10_627), "test": (413, 9_615)}
    assert all(tag != "-NONE-" for s in splits["train"] for _, tag in s)


def test_missing_treebank_names_the_downloader(tmp_path, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(InnError, match="inn download-treebank"):
        read_treebank_sample(tmp_path)


MRG = """( (S (NP-SBJ (DT The) (NN cat) ) (VP (VBD sat) (NP (-NONE- *T*-1) )) (. .) ))
( (S (NP-SBJ (PRP It) ) (VP (VBD purred) ) (. .) ))
"""


def _ldc_copy(root: Path, sections, kind="mrg") -> Path:
    """A Penn Treebank 3-shaped folder with two files per section, for the section split."""
    for section in sections:
        folder = root / ("parsed/mrg/wsj" if kind == "mrg" else "tagged/pos/wsj") / f"{section:02d}"
        folder.mkdir(parents=True)
        for j in range(2):
            name = f"wsj_{section:02d}{j:02d}.{kind}"
            if kind == "mrg":
                (folder / name).write_text(MRG)
            else:
                (folder / name).write_text(
                    "\n======================================\n\n[ The/DT cat/NN ]\nsat/VBD ./. \n\n"
                    "[ It/PRP ]\npurred/VBD ./. \n")
    return root


def test_ptb_section_split_and_trace_removal(tmp_path):
    root = _ldc_copy(tmp_path, range(25))
    splits = read_wsj(root)
    # 2 files x 2 sentences per section; sections 00-18 / 19-21 / 22-24.
    assert {k: len(v) for k, v in splits.items()} == {"train": 76, "dev": 12, "test": 12}
    assert splits["dev"][0] == [("The", "DT"), ("cat", "NN"), ("sat", "VBD"), (".", ".")]


def test_ptb_reads_tagged_pos_files_when_no_trees(tmp_path):
    root = _ldc_copy(tmp_path, [0], kind="pos")
    assert read_ptb(root, [0]) == [[("The", "DT"), ("cat", "NN"), ("sat", "VBD"), (".", ".")],
                                   [("It", "PRP"), ("purred", "VBD"), (".", ".")]] * 2


def test_ptb_missing_section_is_named(tmp_path):
    root = _ldc_copy(tmp_path, [s for s in range(25) if s != 20])
    with pytest.raises(InnError, match="lacks WSJ section 20"):
        read_wsj(root)


def test_ptb_missing_root(tmp_path):
    with pytest.raises(InnError, match="not found"):
        read_ptb(tmp_path / "nope", [0])
    with pytest.raises(InnError, match="no Penn Treebank 3 WSJ files"):
        read_ptb(tmp_path, [0])


GOOD = "# sent_id = 1\n1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n1\tdo\tdo\tAUX\tVBP\t_\t0\troot\t_\t_\n" \
       "2\tn't\tnot\tPART\tRB\t_\t1\tadvmod\t_\t_\n2.1\tx\tx\tX\tFW\t_\t_\t_\t1:dep\t_\n\n"


def test_conllu_skips_ranges_and_empty_nodes(tmp_path):
    path = tmp_path / "a.conllu"
    path.write_text(GOOD * 2)
    assert read_conllu(path) == [[("do", "VBP"), ("n't", "RB")]] * 2
    assert read_conllu(path, column="upos") == [[("do", "AUX"), ("n't", "PART")]] * 2


@pytest.mark.parametrize("bad, message", [
    ("3\tshort\tline\n", r"a\.conllu:7: malformed CoNLL-U line: expected 10 tab-separated fields, found 3"),
    ("x\tw\tw\tX\tFW\t_\t0\troot\t_\t_\n", r"a\.conllu:7: malformed CoNLL-U line"),
    ("3\tw\tw\tX\t_\t_\t0\troot\t_\t_\n", r"a\.conllu:7: token 'w' has no XPOS tag \(read the UPOS column instead: tags: upos\)$"),
])
def test_conllu_malformed_line_names_file_and_line(tmp_path, bad, message):
    path = tmp_path / "a.conllu"
    path.write_text(GOOD + bad)
    with pytest.raises(InnError, match=message):
        read_conllu(path)


def test_conllu_missing_and_empty(tmp_path):
    with pytest.raises(InnError, match="not found"):
        read_conllu(tmp_path / "none.conllu")
    (tmp_path / "e.conllu").write_text("# only a comment\n\n")
    with pytest.raises(InnError, match="no sentences"):
        read_conllu(tmp_path / "e.conllu")


def test_tagged_round_trip(tmp_path):
    sentences = [[("Hello", "UH"), ("world", "NN")], [("!", ".")]]
    write_tagged(tmp_path / "s.tsv", sentences)
    assert read_tagged(tmp_path / "s.tsv") == sentences


def test_a_byte_order_mark_is_not_part_of_line_one(tmp_path):
    """Editors on Windows save UTF-8 with a BOM; line 1 is still the comment it looks like."""
    conllu, tagged = tmp_path / "bom.conllu", tmp_path / "bom.tsv"
    conllu.write_bytes(b"\xef\xbb\xbf" + GOOD.encode("utf-8"))
    tagged.write_bytes("\ufeffÉcole\tNOUN\n.\tPUNCT\n\n".encode("utf-8"))
    assert read_conllu(conllu) == [[("do", "VBP"), ("n't", "RB")]]
    assert read_tagged(tagged) == [[("École", "NOUN"), (".", "PUNCT")]]


def test_read_corpus_by_format(tmp_path):
    """A CoNLL-U corpus with UPOS tags and a word<TAB>tag corpus, files named freely."""
    files = {}
    for i, split in enumerate(("train", "dev", "test")):
        files[split] = tmp_path / f"part{i}.txt"
        files[split].write_text(GOOD * (i + 1))
    upos = read_corpus("conllu", {"tags": "upos", **files})
    assert {split: len(s) for split, s in upos.items()} == {"train": 1, "dev": 2, "test": 3}
    assert upos["train"] == [[("do", "AUX"), ("n't", "PART")]]
    for split, sentences in upos.items():
        write_tagged(files[split], sentences)
    assert read_corpus("tsv", files) == upos
    with pytest.raises(InnError, match=r"^unknown corpus format 'conll'"):
        read_corpus("conll", files)
    files["dev"].write_text("\n\n")
    with pytest.raises(InnError, match="the dev split of this tsv corpus is empty"):
        read_corpus("tsv", files)


def test_tagged_line_without_a_tag_names_file_and_line(tmp_path):
    (tmp_path / "t.tsv").write_text("a\tDT\n\nword-without-tag\n")
    with pytest.raises(InnError, match=r"t\.tsv:3: expected 'word<TAB>tag', found 'word-without-tag'"):
        read_tagged(tmp_path / "t.tsv")
