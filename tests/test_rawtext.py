"""Running text in (issue #46): tokenization, CoNLL 2018 scores, and the warnings of ``inn tag``.

The tokenizer's conventions are checked on crafted sentences against the splits UD English
EWT and the Penn Treebank write; the scorer against hand-computed counts; the command on a tiny
BiLSTM (a few hundred EWT sentences, one epoch) so that the tests take seconds.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import time

import pytest
from conftest import conllu_source, export_argv, first_sentences, tiny_bilstm_tagger

from inn.conll18 import score_texts
from inn.data.documents import conllu_to_text, raw_to_conllu, read_conllu_text, write_text
from inn.data.tokenize import PTB_ESCAPES, Tokenizer, ptb_escapes, tokenizer_for
from inn.errors import InnError
from inn.experiment.cli import main
from inn.tagger import Tagger

VOCABULARY = ["e-mail", "mr.", "w/", "the", "cat"]


def _words(sentences):
    return [[(w.form, w.model_form) for w in s.words] for s in sentences]


def _tokens(sentences):
    return [[[w.form for w in t.words] for t in s.tokens] for s in sentences]


# --------------------------------------------------------------------------- tokenizer


def test_ud_writes_brackets_and_quotes_as_written():
    text = 'He said "hi" (twice) [ok] and “bye”.'
    (sentence,) = Tokenizer("ud", VOCABULARY).split(text)
    assert _words([sentence]) == [
        [(f, f) for f in ["He", "said", '"', "hi", '"', "(", "twice", ")", "[", "ok", "]", "and", "“", "bye", "”", "."]]
    ]


def test_ptb_escapes_brackets_and_quotes_for_the_model_only():
    text = 'He said "hi" (twice) {ok} and “bye”.'
    (sentence,) = Tokenizer("ptb", VOCABULARY).split(text)
    assert [w.form for w in sentence.words] == [
        "He",
        "said",
        '"',
        "hi",
        '"',
        "(",
        "twice",
        ")",
        "{",
        "ok",
        "}",
        "and",
        "“",
        "bye",
        "”",
        ".",
    ]
    assert [w.model_form for w in sentence.words] == [
        "He",
        "said",
        "``",
        "hi",
        "''",
        "-LRB-",
        "twice",
        "-RRB-",
        "-LCB-",
        "ok",
        "-RCB-",
        "and",
        "``",
        "bye",
        "''",
        ".",
    ]


def test_ptb_brackets_are_read_as_the_escapes_training_saw():
    """NLTK's sample writes braces (-LCB-, tagged -LRB-) but no square brackets: a quick tagger
    read ``[`` as the unseen -LSB- and tagged it JJ. A bracket is read as the nearest escape of
    its kind that the vocabulary holds, and as the Penn Treebank's own when it holds none."""
    text = "See [ok] and {ok} (ok)."
    braces = Tokenizer("ptb", VOCABULARY + ["-LRB-", "-RRB-", "-LCB-", "-RCB-"]).split(text)
    assert [w.model_form for w in braces[0].words] == [
        "See",
        "-LCB-",
        "ok",
        "-RCB-",
        "and",
        "-LCB-",
        "ok",
        "-RCB-",
        "-LRB-",
        "ok",
        "-RRB-",
        ".",
    ]
    assert [w.form for w in braces[0].words] == ["See", "[", "ok", "]", "and", "{", "ok", "}", "(", "ok", ")", "."]
    round_only = ptb_escapes(["-lrb-", "-rrb-"])
    assert (round_only["["], round_only["}"]) == ("-LRB-", "-RRB-")
    assert ptb_escapes(["-LSB-", "-LCB-"])["["] == "-LSB-" and ptb_escapes(["-LSB-"])["{"] == "-LSB-"
    assert ptb_escapes(VOCABULARY) == PTB_ESCAPES


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("I'm sure you don't.", [["I", "'m"], ["sure"], ["you"], ["do", "n't"], ["."]]),
        ("It’s fine, isn’t it?", [["It", "’s"], ["fine"], [","], ["is", "n’t"], ["it"], ["?"]]),
        ("We can't, I cannot.", [["We"], ["ca", "n't"], [","], ["I"], ["can", "not"], ["."]]),
        (
            "gonna see John's and the parents' cars",
            [["gon", "na"], ["see"], ["John", "'s"], ["and"], ["the"], ["parents", "'"], ["cars"]],
        ),
        ("They'll say we've dont", [["They", "'ll"], ["say"], ["we", "'ve"], ["do", "nt"]]),
        ("she said 'no' twice", [["she"], ["said"], ["'"], ["no"], ["'"], ["twice"]]),
    ],
)
def test_ud_clitics_are_multiword_tokens(text, tokens):
    (sentence,) = Tokenizer("ud", VOCABULARY).split(text)
    assert _tokens([sentence]) == [tokens]


@pytest.mark.parametrize("convention", ["ud", "ptb"])
def test_a_line_break_inside_a_paragraph_tokenizes_as_a_space(convention):
    """Wrapped running text (UD's .txt files, ``inn conllu-text``) splits as unwrapped: the
    Treebank rules for clitics need a space after them, and a line break is one."""
    tokenizer = Tokenizer(convention, VOCABULARY)
    wrapped = "So I'm\ngoing home and it's\r\nlate, isn't\tit? We can\nnot stay.\n"
    spaced = re.sub(r"\s", " ", wrapped)
    assert _tokens(tokenizer.split(wrapped)) == _tokens(tokenizer.split(spaced))
    assert _tokens(tokenizer.split(wrapped))[0][1:3] == (
        [["I", "'m"], ["going"]] if convention == "ud" else [["I"], ["'m"]]
    )
    for sentence in tokenizer.split(wrapped):
        assert all(wrapped[w.start : w.end] == w.form for w in sentence.words)


@pytest.mark.parametrize("unit", ["a", "-"])
def test_a_long_run_without_a_space_tokenizes_in_linear_work(unit):
    """A line of one long token (a million characters did not return in five minutes: the
    e-mail pattern was tried from every position of the run, and a run of ``-`` was joined
    piece by piece). Eight times the text must cost far less than the 64 times a quadratic step
    gives (linear: about 8); CPU time, best of two, so that a busy machine does not decide."""
    tokenizer = Tokenizer("ud", VOCABULARY)

    def cost(n: int) -> float:
        text = unit * n
        best = math.inf
        for _ in range(2):
            start = time.process_time()
            sentences = tokenizer.split(text)
            best = min(best, time.process_time() - start)
        assert "".join(t.form for s in sentences for t in s.tokens) == text
        return best

    assert cost(80_000) < 24 * max(cost(10_000), 0.002)


def test_ptb_clitics_are_tokens_of_their_own():
    (sentence,) = Tokenizer("ptb", VOCABULARY).split("I'm sure you don't.")
    assert _tokens([sentence]) == [[["I"], ["'m"], ["sure"], ["you"], ["do"], ["n't"], ["."]]]


def test_ud_hyphens_slashes_urls_emoticons_and_punctuation_runs():
    text = (
        "A search-engine and e-mail, a non-profit and 15-year plan w/it and/or mail me@x.org or see "
        "http://x.org/a-b?c=1 :) now!!! Really?!"
    )
    tokens = [t.form for s in Tokenizer("ud", VOCABULARY).split(text) for t in s.tokens]
    assert tokens == [
        "A",
        "search",
        "-",
        "engine",
        "and",
        "e-mail",
        ",",
        "a",
        "non-profit",
        "and",
        "15",
        "-",
        "year",
        "plan",
        "w/",
        "it",
        "and",
        "/",
        "or",
        "mail",
        "me@x.org",
        "or",
        "see",
        "http://x.org/a-b?c=1",
        ":)",
        "now",
        "!!!",
        "Really",
        "?!",
    ]


def test_sentences_abbreviations_and_paragraphs():
    text = "Mr. Smith arrived at 5 p.m. today. He left!! Did he?\nYes, he did.\n\n \nA new paragraph"
    sentences = Tokenizer("ud", VOCABULARY).split(text)
    assert [s.text for s in sentences] == [
        "Mr. Smith arrived at 5 p.m. today.",
        "He left!!",
        "Did he?",
        "Yes, he did.",
        "A new paragraph",
    ]
    assert [s.new_paragraph for s in sentences] == [True, False, False, False, True]


def test_offsets_are_the_text_slices_and_cover_every_character():
    text = "  I'm (really) “sure” — isn’t it?\tYes!!\n\nNew-ish text w/o problems: 3.5% of $10.  "
    sentences = Tokenizer("ud", VOCABULARY).split(text)
    for sentence in sentences:
        for token in sentence.tokens:
            assert text[token.start : token.end] == token.form
            for word in token.words:
                assert text[word.start : word.end] == word.form
    covered = "".join(token.form for s in sentences for token in s.tokens)
    assert covered == "".join(text.split())


def test_conllu_output_keeps_the_text_recoverable():
    text = "I'm here (again), aren't I?  Yes.\nWe're fine!\n\nNext: the cat's bowl."
    sentences = Tokenizer("ud", VOCABULARY).split(text)
    out = write_text(raw_to_conllu(sentences, doc_id="doc1"), [["X"] * len(s.words) for s in sentences], "conllu")
    assert out.startswith(
        "# newdoc id = doc1\n# newpar\n# sent_id = 1\n# text = I'm here (again), aren't I?\n1-2\tI'm\t"
    )
    assert "\n1\tI\t_\t_\tX\t" in out and "\n2\t'm\t_\t_\tX\t" in out
    for sentence in read_conllu_text(out, "out"):  # # text = the tokens' forms, a space unless SpaceAfter=No
        said = next(f[0] for f in sentence.lines if f[0].startswith("# text = "))[len("# text = ") :]
        rebuilt, skip = "", 0
        for fields in sentence.lines:
            if len(fields) == 1:
                continue
            if skip:  # a word of the multiword token just written
                skip -= 1
                continue
            if "-" in fields[0]:
                first, last = map(int, fields[0].split("-"))
                skip = last - first + 1
            rebuilt += fields[1] + ("" if fields[9] == "SpaceAfter=No" else " ")
        assert rebuilt.strip() == said
    assert conllu_to_text(out, width=0) == ("I'm here (again), aren't I? Yes. We're fine!\n\nNext: the cat's bowl.\n")


def test_a_language_without_a_tokenizer_is_refused_by_name():
    with pytest.raises(InnError, match="no tokenizer for language 'fr'"):
        tokenizer_for("fr")
    with pytest.raises(InnError, match="does not record its language"):
        tokenizer_for(None)
    assert tokenizer_for("en_US").language == "en"


# --------------------------------------------------------------------------- the CoNLL 2018 scores


def _conllu(sentences: list[list[str]]) -> str:
    """CoNLL-U from sentences of tokens: ``"word/TAG"``, or ``"surface a/TAG b/TAG"`` for a
    multiword token."""
    out = []
    for tokens in sentences:
        lines, n = [], 0
        for token in tokens:
            parts = token.split(" ")
            if len(parts) > 1:
                lines.append(f"{n + 1}-{n + len(parts) - 1}\t{parts[0]}" + "\t_" * 8)
                parts = parts[1:]
            for part in parts:
                n += 1
                form, tag = part.split("/") if "/" in part else (part, "X")
                lines.append(f"{n}\t{form}\t_\t{tag}\t{tag}" + "\t_" * 5)
        out.append("\n".join(lines) + "\n\n")
    return "".join(out)


def _counts(score):
    return score.correct, score.gold, score.system


def test_gold_against_itself_scores_100():
    gold = _conllu([["I'm I/PRP 'm/VBP", "here/RB", "./."], ["Go/VB", "!/."]])
    scores = score_texts(gold, gold)
    assert {name: score.f1 for name, score in scores.items()} == dict.fromkeys(scores, 100.0)
    assert _counts(scores["Tokens"]) == (5, 5, 5) and _counts(scores["Words"]) == (6, 6, 6)


@pytest.mark.parametrize(
    "gold, system, words",
    [
        # counted by hand: words aligned by span, or by their forms' LCS inside a multiword span
        (["abc a b c"], ["a", "b", "c"], 3),
        (["a", "bc b c", "d"], ["a", "b", "c", "d"], 4),
        (["abcd a b c d"], ["ab a b", "cd c d"], 4),
        (["abcd"], ["a", "b", "c", "d"], 0),
        (["a", "bc", "d"], ["a", "b", "c", "d"], 2),
        (["a", "bc b c", "d"], ["a", "b", "cd"], 2),
        (["abc a BX c", "def d EX f"], ["ab a b", "cd c d", "ef e f"], 4),
    ],
)
def test_words_align_as_the_shared_task_aligns_them(gold, system, words):
    scores = score_texts(_conllu([gold]), _conllu([system]))
    n_gold = sum(max(1, len(t.split(" ")) - 1) for t in gold)
    n_system = sum(max(1, len(t.split(" ")) - 1) for t in system)
    assert _counts(scores["Words"]) == (words, n_gold, n_system)
    assert scores["Words"].f1 == pytest.approx(200 * words / (n_gold + n_system))


def test_tokens_sentences_and_tags_with_a_multiword_token_and_other_sentence_breaks():
    gold = _conllu([["Don't do/VBP n't/RB", "go/VB", "./."], ["Kim/NNP", "left/VBD", "./."]])
    # the clitic as two tokens, one sentence for two, a wrong tag and a split "left" -> "le" "ft"
    system = _conllu([["Do/VBP", "n't/RB", "go/VBP", "./.", "Kim/NNP", "le/VBD", "ft/VBD", "./."]])
    scores = score_texts(gold, system)
    assert _counts(scores["Tokens"]) == (4, 6, 8)  # go . Kim . (not Don't, left)
    assert _counts(scores["Sentences"]) == (0, 2, 1)  # starts together, ends elsewhere
    assert _counts(scores["Words"]) == (6, 7, 8)  # Do n't (LCS, lowercased) go . Kim .
    assert _counts(scores["XPOS"]) == (5, 7, 8)  # go/VBP is wrong
    assert scores["XPOS"].f1 == pytest.approx(200 * 5 / 15)
    assert scores["XPOS"].aligned_accuracy == pytest.approx(100 * 5 / 6)
    three = _conllu([["Do/VBP", "n't/RB", "go/VB", "./."], ["Kim/NNP"], ["left/VBD", "./."]])
    assert _counts(score_texts(gold, three)["Sentences"]) == (1, 2, 3)


def test_columns_a_file_leaves_empty_are_named_not_scored():
    """The shared task counts _ = _ as right: a column either file leaves empty gets a row that
    measures nothing (0, or the Words row again), and files given in the wrong order show as a
    gold file without tags."""
    from inn.conll18 import evaluate, read_ud, unscored

    gold = read_ud(_conllu([["Kim/NNP", "left/VBD"]]))
    xpos_only = read_ud(
        _conllu([["Kim/NNP", "left/VBD"]]).replace("\tNNP\tNNP", "\t_\tNNP").replace("\tVBD\tVBD", "\t_\tVBD")
    )
    upos_only = read_ud(
        _conllu([["Kim/NNP", "left/VBD"]]).replace("\tNNP\tNNP", "\tPROPN\t_").replace("\tVBD\tVBD", "\tVERB\t_")
    )
    assert unscored(gold, gold) == {}
    assert evaluate(gold, xpos_only)["UPOS"].f1 == 0.0
    assert unscored(gold, xpos_only) == {
        "UPOS": "the system file gives no UPOS (every word's is _): its row is 0 by construction"
    }
    assert unscored(xpos_only, gold) == {
        "UPOS": "the gold file gives no UPOS (every word's is _): its row is 0 by construction"
    }
    assert evaluate(upos_only, upos_only)["XPOS"].f1 == 100.0
    assert unscored(upos_only, upos_only) == {
        "XPOS": "neither file gives XPOS: its row counts _ against _, the Words row again"
    }


def test_another_text_is_refused_naming_where_it_differs():
    with pytest.raises(InnError, match=r"from character 2 \(gold 'c', system 'x'\)"):
        score_texts(_conllu([["ab", "c"]]), _conllu([["ab", "x"]]))


# --------------------------------------------------------------------------- inn tag --input text


@pytest.fixture(scope="module")
def tagger_file(tmp_path_factory, ewt_dir):
    """A tiny BiLSTM of 300 EWT sentences, exported with its prepared data."""
    root = tmp_path_factory.mktemp("rawtext")
    train_file = root / "train.conllu"
    train_file.write_text(first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 300), encoding="utf-8")
    source = conllu_source(train_file, ewt_dir / "en_ewt-ud-dev.conllu", ewt_dir / "en_ewt-ud-test.conllu")
    features = {"max_words": 2000, "max_affixes": 200, "word_dim": 8, "affix_dim": 2}
    checkpoint = tiny_bilstm_tagger(root, source, features, 8, max_train=300, max_dev=50)
    assert main(export_argv(checkpoint, root / "tagger.pt", "--data", root / "data")) == 0
    return root / "tagger.pt"


def test_tagger_file_records_language_format_and_dev_unseen_share(tagger_file):
    tagger = Tagger.load(tagger_file, "cpu")
    assert (tagger.language, tagger.convention, tagger.data["format"]) == ("en", "ud", "conllu")
    assert 0.05 < tagger.data["dev_unseen"] < 0.5
    sentences = tagger.tag_text("I'm here. Are you?")
    assert [[w.form for w in s.words] for s in sentences] == [["I", "'m", "here", "."], ["Are", "you", "?"]]
    assert [len(s.tags) for s in sentences] == [4, 3] and all(t in tagger.tags for s in sentences for t in s.tags)
    tagger.data["language"] = "de"
    with pytest.raises(InnError, match="no tokenizer for language 'de'"):
        tagger.tag_text("Ich bin hier.")
    # a Penn Treebank tagger's pre-tokenized brackets, as its training wrote them
    tagger.data["format"], tagger.features.word_counts["-lcb-"] = "ptb", 1
    assert tagger.model_words(["(", "[", "x", "]", ")"]) == ["-LRB-", "-LCB-", "x", "-RSB-", "-RRB-"]


def test_tag_text_scored_against_its_gold_file(tmp_path, tagger_file, ewt_dir, capsys, caplog):
    gold_text = first_sentences(ewt_dir / "en_ewt-ud-test.conllu", 40)
    gold = tmp_path / "gold.conllu"
    gold.write_text(gold_text, encoding="utf-8")
    raw = tmp_path / "raw.txt"
    assert main(["conllu-text", str(gold), "--out", str(raw)]) == 0
    out, metrics = tmp_path / "tagged.conllu", tmp_path / "m.json"
    tag_raw = ["tag", str(tagger_file), "--input", "text", str(raw)]
    assert main([*tag_raw, "--gold", str(gold), "--out", str(out), "--metrics", str(metrics)]) == 0
    scores = json.loads(metrics.read_text())
    assert scores["conll18"]["Words"]["f1"] > 95 and scores["tokens_per_second"] > 0
    caplog.set_level(logging.WARNING)
    caplog.clear()
    assert main(["score-text", str(gold), str(out), "--out", str(tmp_path / "s.json")]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^Words\s+\|", table, re.M)
    # an XPOS tagger's UPOS row is 0 by construction, and says so
    assert [r.getMessage() for r in caplog.records] == [
        "UPOS: the system file gives no UPOS (every word's is _): its row is 0 by construction"
    ]
    caplog.clear()
    assert main(["score-text", str(out), str(gold)]) == 0 and capsys.readouterr().out
    assert [r.getMessage() for r in caplog.records] == [
        "UPOS: the gold file gives no UPOS (every word's is _): its row is 0 by construction; are the files in the "
        "order GOLD SYSTEM?"
    ]
    again = json.loads((tmp_path / "s.json").read_text())
    assert again["unscored"] == {
        "UPOS": "the system file gives no UPOS (every word's is _): its row is 0 by construction"
    }
    # a gold file without the tagger's column: the one tag score inn tag gives says it measures nothing
    no_xpos = tmp_path / "no_xpos.conllu"
    no_xpos.write_text(re.sub(r"^(\d+\t(?:[^\t]*\t){3})[^\t]*", r"\1_", gold_text, flags=re.M), encoding="utf-8")
    caplog.clear()
    assert main([*tag_raw, "--gold", str(no_xpos), "--out", str(tmp_path / "again.conllu")]) == 0
    assert "XPOS F1 below measures nothing: the gold file gives no XPOS (every word's is _)" in caplog.text
    assert again["XPOS"]["f1"] == pytest.approx(scores["conll18"]["XPOS"]["f1"])
    assert main(["score-text", str(gold), str(gold)]) == 0
    assert all(float(line.split("|")[3]) == 100.0 for line in capsys.readouterr().out.splitlines()[2:])
    packed = tmp_path / "tagged.conllu.gz"
    packed.write_bytes(gzip.compress(out.read_bytes()))
    assert main(["score-text", str(gold), str(packed)]) == 0 and capsys.readouterr().out == table


def test_refusals_and_warnings(tmp_path, tagger_file, ewt_dir, capsys, caplog):
    text = tmp_path / "t.txt"
    text.write_text("Hello there.\n", encoding="utf-8")
    assert main(["tag", str(tagger_file), "--input", "text", "--language", "fr", str(text)]) == 2
    assert "error: no tokenizer for language 'fr'" in capsys.readouterr().err
    assert main(["tag", str(tagger_file), "--input", "text", "--accuracy", str(text)]) == 2
    assert "--gold GOLD.conllu" in capsys.readouterr().err
    caplog.set_level(logging.WARNING)
    conllu = tmp_path / "in.txt"
    conllu.write_text(first_sentences(ewt_dir / "en_ewt-ud-test.conllu", 3))
    assert main(["tag", str(tagger_file), "--input", "horizontal", str(conllu), "--out", str(tmp_path / "o")]) == 0
    assert "is a CoNLL-U token line" in caplog.text and "give --input conllu" in caplog.text
    caplog.clear()
    running = tmp_path / "running.txt"
    running.write_text("Introduction. We see (here) that America: is big, and it works.\n" * 3, encoding="utf-8")
    assert main(["tag", str(tagger_file), str(running), "--out", str(tmp_path / "o")]) == 0
    assert "give --input text" in caplog.text
    caplog.clear()
    french = tmp_path / "fr.txt"
    french.write_text(
        "Les grenouilles sautillent joyeusement près des étangs verdoyants où dorment quelques "
        "libellules dorées. " * 10,
        encoding="utf-8",
    )
    assert main(["tag", str(tagger_file), "--input", "text", str(french), "--out", str(tmp_path / "o")]) == 0
    assert re.search(
        r"\d+\.\d% of the \d+ words are unseen .* \(its dev set's \d+\.\d%\): the text looks foreign", caplog.text
    )


def test_accuracy_names_tags_outside_the_tag_set_and_the_unseen_share(tmp_path, tagger_file, ewt_dir, capsys, caplog):
    blocks = (ewt_dir / "en_ewt-ud-test.conllu").read_text(encoding="utf-8").split("\n\n")[:20]
    gold = "\n\n".join(blocks) + "\n\n"
    gold = re.sub(r"^(1\t[^\t]*\t[^\t]*\t[^\t]*\t)[^\t]*", r"\1NOTATAG", gold, flags=re.M)  # every first word
    path = tmp_path / "g.conllu"
    path.write_text(gold, encoding="utf-8")
    caplog.set_level(logging.INFO)
    metrics = tmp_path / "m.json"
    assert (
        main(
            ["tag", str(tagger_file), str(path), "--accuracy", "--metrics", str(metrics), "--out", str(tmp_path / "o")]
        )
        == 0
    )
    scores = json.loads(metrics.read_text())
    assert scores["tags_outside"] == {"NOTATAG": 20} and scores["outside_tokens"] == 20
    assert scores["unseen_share"] == pytest.approx(scores["unseen_tokens"] / scores["tokens"])
    assert scores["dev_unseen_share"] == pytest.approx(Tagger.load(tagger_file, "cpu").data["dev_unseen"])
    assert "20 gold tokens" in caplog.text and "outside the model's tag set (NOTATAG x20)" in caplog.text
    assert "of the tokens are unseen in training; its dev set:" in caplog.text


def test_a_corpus_language_comes_from_its_format_or_ud_file_name():
    from inn.data.corpora import corpus_language

    assert corpus_language("nltk_treebank", {}) == "en" and corpus_language("ptb", {"path": "/x"}) == "en"
    assert corpus_language("conllu", {"train": "/d/UD_French-GSD/fr_gsd-ud-train.conllu"}) == "fr"
    assert corpus_language("conllu", {"train": "train.conllu", "dev": "dev.conllu"}) is None
    assert corpus_language("tsv", {"train": "en_ewt-ud-train.tsv"}) is None
