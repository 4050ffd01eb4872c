"""Corpus readers: sizes on the shared corpora, an LDC-style copy made on the fly, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from inn.data.corpora import (
    read_conllu,
    read_corpus,
    read_ewt,
    read_ptb,
    read_tagged,
    read_treebank_sample,
    read_wsj,
    write_tagged,
)
from inn.errors import InnError


def _sizes(splits):
    return {k: (len(v), sum(map(len, v))) for k, v in splits.items()}


def test_ewt_sizes_equal_spec(ewt_dir):
    assert _sizes(read_ewt(ewt_dir)) == {"train": (12_544, 204_577), "dev": (2_001, 25_147), "test": (2_077, 25_094)}


def test_ewt_skips_multiword_ranges_and_keeps_ptb_tags(ewt_dir):
    train = read_conllu(ewt_dir / "en_ewt-ud-train.conllu")
    text = (ewt_dir / "en_ewt-ud-train.conllu").read_text(encoding="utf-8")
    ranges = sum(
        1 for line in text.splitlines() if line and line.split("\t")[0].count("-") == 1 and not line.startswith("#")
    )
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
                    "[ It/PRP ]\npurred/VBD ./. \n"
                )
    return root


def test_ptb_section_split_and_trace_removal(tmp_path):
    root = _ldc_copy(tmp_path, range(25))
    splits = read_wsj(root)
    # 2 files x 2 sentences per section; sections 00-18 / 19-21 / 22-24.
    assert {k: len(v) for k, v in splits.items()} == {"train": 76, "dev": 12, "test": 12}
    assert splits["dev"][0] == [("The", "DT"), ("cat", "NN"), ("sat", "VBD"), (".", ".")]


def test_ptb_reads_tagged_pos_files_when_no_trees(tmp_path):
    root = _ldc_copy(tmp_path, [0], kind="pos")
    assert (
        read_ptb(root, [0])
        == [[("The", "DT"), ("cat", "NN"), ("sat", "VBD"), (".", ".")], [("It", "PRP"), ("purred", "VBD"), (".", ".")]]
        * 2
    )


def test_ptb_missing_section_is_named(tmp_path):
    root = _ldc_copy(tmp_path, [s for s in range(25) if s != 20])
    with pytest.raises(InnError, match="lacks WSJ section 20"):
        read_wsj(root)


def test_ptb_missing_root(tmp_path):
    with pytest.raises(InnError, match="not found"):
        read_ptb(tmp_path / "nope", [0])
    with pytest.raises(InnError, match="no Penn Treebank 3 WSJ files"):
        read_ptb(tmp_path, [0])


GOOD = (
    "# sent_id = 1\n1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n1\tdo\tdo\tAUX\tVBP\t_\t0\troot\t_\t_\n"
    "2\tn't\tnot\tPART\tRB\t_\t1\tadvmod\t_\t_\n2.1\tx\tx\tX\tFW\t_\t_\t_\t1:dep\t_\n\n"
)


def test_conllu_skips_ranges_and_empty_nodes(tmp_path):
    path = tmp_path / "a.conllu"
    path.write_text(GOOD * 2)
    assert read_conllu(path) == [[("do", "VBP"), ("n't", "RB")]] * 2
    assert read_conllu(path, column="upos") == [[("do", "AUX"), ("n't", "PART")]] * 2


@pytest.mark.parametrize(
    "bad, message",
    [
        ("3\tshort\tline\n", r"a\.conllu:7: malformed CoNLL-U line: expected 10 tab-separated fields, found 3"),
        ("x\tw\tw\tX\tFW\t_\t0\troot\t_\t_\n", r"a\.conllu:7: malformed CoNLL-U line"),
        (
            "1\tw\tw\tX\t_\t_\t0\troot\t_\t_\n",
            r"a\.conllu:7: token 'w' has no XPOS tag \(read the UPOS column instead: tags: upos\)$",
        ),
    ],
)
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
    with pytest.raises(
        InnError, match=rf"^the dev file {files['dev']} holds no sentences: name a file with at least one$"
    ):
        read_corpus("tsv", files)
    with pytest.raises(InnError, match=rf"^corpora\.mine\.dev: {files['dev']} holds no sentences"):
        read_corpus("tsv", files, "mine")


def test_tagged_line_without_a_tag_names_file_and_line(tmp_path):
    (tmp_path / "t.tsv").write_text("a\tDT\n\nword-without-tag\n")
    with pytest.raises(InnError, match=r"t\.tsv:3: expected 'word<TAB>tag', found no tab: 'word-without-tag'$"):
        read_tagged(tmp_path / "t.tsv")


# --------------------------------------------------------------------------- strict readers (issue 29)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "a\tNN\tX\n",
            r"t\.tsv:1: expected 'word<TAB>tag', found 3 tab-separated fields: 'a\\tNN\\tX' \(keep two "
            r"columns: cut -f1,2 for a word and its tag\)$",
        ),
        ("the\tDT\nNew\tYork\tNNP\n", r"t\.tsv:2: expected 'word<TAB>tag', found 3 tab-separated fields"),
        ("\tNN\n", r"t\.tsv:1: expected 'word<TAB>tag', found an empty field: '\\tNN'$"),
        ("a\t\n", r"t\.tsv:1: expected 'word<TAB>tag', found an empty field"),
    ],
)
def test_tagged_line_with_other_than_two_fields_is_refused(tmp_path, text, message):
    """A third column never becomes part of the tag (`NN\\tX`, a tag type of its own)."""
    (tmp_path / "t.tsv").write_text(text)
    with pytest.raises(InnError, match=message):
        read_tagged(tmp_path / "t.tsv")


SECOND = "1\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n"


@pytest.mark.parametrize(
    "text, message",
    [
        # two sentences with no blank line between them: one sentence of both, before
        (
            GOOD.rstrip("\n") + "\n" + SECOND,
            r"a\.conllu:6: token ID 1 after token 2 of the same sentence: a blank line is "
            r"missing before this sentence",
        ),
        (GOOD.rstrip("\n") + "\n# sent_id = 2\n" + SECOND, r"a\.conllu:7: token ID 1 after token 2"),
        (
            GOOD.rstrip("\n") + "\n" + SECOND.replace("1\t", "2\t", 1),
            r"a\.conllu:6: malformed CoNLL-U line: token ID 2 repeats an earlier token's ID \(expected 3\)$",
        ),
        (
            SECOND.replace("1\t", "2\t", 1),
            r"a\.conllu:1: malformed CoNLL-U line: token ID 2 skips ID 1 \(expected 1\)$",
        ),
        (
            SECOND.replace("1\t", "0\t", 1),
            r"a\.conllu:1: malformed CoNLL-U line: token ID 0 is not a word ID \(they count "
            r"from 1\) \(expected 1\)$",
        ),
    ],
)
def test_conllu_token_ids_that_restart_or_repeat_are_refused(tmp_path, text, message):
    path = tmp_path / "a.conllu"
    path.write_text(text)
    with pytest.raises(InnError, match=message):
        read_conllu(path)


def test_conllu_sentences_are_counted_as_the_file_has_them(tmp_path):
    path = tmp_path / "a.conllu"
    path.write_text((GOOD + SECOND + "\n") * 3)  # the multiword range and empty node do not break the count
    assert read_conllu(path) == [[("do", "VBP"), ("n't", "RB")], [("go", "VB")]] * 3


@pytest.mark.parametrize("reader", [read_conllu, read_tagged])
def test_undecodable_byte_is_named_by_file_line_and_offset(tmp_path, reader):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9\tNN\n".encode("latin-1"))
    with pytest.raises(
        InnError,
        match=r"latin1\.txt:1: byte 3 \(0xe9\) is not UTF-8: convert the file to UTF-8 "
        r"\(e\.g\. iconv -f latin1 -t utf-8\)$",
    ):
        reader(path)
    path.write_bytes(b"\xef\xbb\xbfa\tDT\n\nb\tNN\n\xff\tX\n")  # offsets count the byte-order mark
    with pytest.raises(InnError, match=r"latin1\.txt:4: byte 14 \(0xff\) is not UTF-8"):
        read_tagged(path)


def test_gzip_corpus_is_read_decompressed(tmp_path):
    import gzip

    (tmp_path / "a.conllu.gz").write_bytes(gzip.compress(GOOD.encode()))
    (tmp_path / "t.tsv.gz").write_bytes(gzip.compress(b"a\tDT\r\nb\tNN\r\n"))
    assert read_conllu(tmp_path / "a.conllu.gz") == [[("do", "VBP"), ("n't", "RB")]]
    assert read_tagged(tmp_path / "t.tsv.gz") == [[("a", "DT"), ("b", "NN")]]
    whole = gzip.compress(b"a\tDT\n" * 100)
    (tmp_path / "bad.gz").write_bytes(whole[: len(whole) - 10])  # cut in its checksum
    with pytest.raises(InnError, match=r"bad\.gz: damaged gzip file \(.+\): decompress a sound copy$"):
        read_tagged(tmp_path / "bad.gz")
    (tmp_path / "l.gz").write_bytes(gzip.compress(b"a\tDT\n\xe9\tNN\n"))
    with pytest.raises(InnError, match=r"l\.gz:2: byte 5 of the decompressed text \(0xe9\) is not UTF-8"):
        read_tagged(tmp_path / "l.gz")


def test_folder_given_as_a_file_says_so(tmp_path):
    for reader, what in ((read_conllu, "CoNLL-U file"), (read_tagged, "tagged corpus file")):
        with pytest.raises(InnError, match=rf"^{tmp_path} is a folder, not a {what}: name the file itself$"):
            reader(tmp_path)


def test_carriage_return_inside_a_line_is_refused(tmp_path):
    (tmp_path / "mac.tsv").write_bytes(b"a\tDT\rb\tNN\r")
    with pytest.raises(InnError, match=r"mac\.tsv:1: a carriage return inside the line"):
        read_tagged(tmp_path / "mac.tsv")


def test_a_treebank_folder_given_is_the_only_one_searched(tmp_path, nltk_data, monkeypatch):
    """Another copy on NLTK's path (NLTK_DATA) must not stand in for a folder that lacks the sample."""
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(nltk_data)])
    with pytest.raises(
        InnError,
        match=rf"^the NLTK data folder {tmp_path} holds no corpora/treebank: run "
        r"`inn download-treebank --out-dir DIR`",
    ):
        read_treebank_sample(tmp_path)
    assert str(nltk_data) in nltk.data.path  # the search path is restored (the folder given is trusted, as before)


# Property: whatever bytes a tagged or CoNLL-U file holds, the reader either returns exactly the
# sentences they spell or stops with an InnError; never another exception, never a sentence
# altered without a word.

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st

_FIELD = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r"), max_size=6)
_ENDINGS = st.sampled_from(["\n", "\r\n"])


def _expected_tagged(lines: list[str]) -> list[list[tuple[str, str]]] | None:
    """The sentences ``lines`` spell as word<TAB>tag, or None where they must be refused."""
    sentences, sentence = [], []
    for line in lines:
        if not line.strip(" \t"):
            if sentence:
                sentences.append(sentence)
            sentence = []
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not all(fields) or fields[1] != fields[1].strip():  # "NN " is no tag of its own
            return None
        sentence.append((fields[0], fields[1]))
    return sentences + ([sentence] if sentence else [])


_TAGGED_LINE = st.one_of(
    st.tuples(_FIELD, _FIELD).map("\t".join),  # word<TAB>tag, either possibly empty
    st.lists(_FIELD, min_size=1, max_size=4).map("\t".join),  # any number of tabs
    st.sampled_from(["", " ", "\t", " \t "]),  # blank lines
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(_TAGGED_LINE, max_size=8),
    ending=_ENDINGS,
    bom=st.booleans(),
    gz=st.booleans(),
    noise=st.one_of(st.none(), st.binary(min_size=1, max_size=3)),
)
def test_tagged_reader_returns_what_the_file_says_or_one_line(tmp_path, lines, ending, bom, gz, noise):
    import gzip

    data = ("\ufeff" if bom else "") + "".join(line + ending for line in lines)
    raw = data.encode("utf-8")
    if noise is not None:  # bytes that may break the encoding
        raw = raw[: len(raw) // 2] + noise + raw[len(raw) // 2 :]
    path = tmp_path / "t.tsv"
    path.write_bytes(gzip.compress(raw) if gz else raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    try:
        sentences = read_tagged(path)
    except InnError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    assert text is not None  # undecodable bytes never pass
    text = text.removeprefix("\ufeff")
    physical = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    lines = [line.removesuffix("\r") for line in physical]
    assert all("\r" not in line for line in lines)
    assert sentences == _expected_tagged(lines)


_ID = st.one_of(st.integers(0, 4).map(str), st.sampled_from(["1-2", "2.1", "x", "01"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.one_of(
            st.tuples(_ID, _FIELD, st.sampled_from(["NN", "VB", "_", "a\tb"])), st.sampled_from(["", "# c", "\t"])
        ),
        max_size=8,
    ),
    ending=_ENDINGS,
)
def test_conllu_reader_returns_what_the_file_says_or_one_line(tmp_path, rows, ending):
    """Token IDs in any order, blank lines anywhere: each sentence read is one the file spells
    with IDs 1..n, or the reader names file and line."""
    lines = [row if isinstance(row, str) else f"{row[0]}\t{row[1]}\t_\tX\t{row[2]}\t_\t_\t_\t_\t_" for row in rows]
    path = tmp_path / "a.conllu"
    path.write_bytes("".join(line + ending for line in lines).encode("utf-8"))
    try:
        sentences = read_conllu(path)
    except InnError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    expected, sentence = [], []
    for row in rows + [""]:
        if isinstance(row, str):
            if not row.strip(" \t") and sentence:
                expected.append(sentence)
                sentence = []
            continue
        if row[0].isdigit():
            assert row[0] == str(len(sentence) + 1) and row[2] != "_"
            sentence.append((row[1], row[2]))
    assert sentences == expected
