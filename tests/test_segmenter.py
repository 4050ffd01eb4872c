"""The segmenter learned from a treebank's text (issue #67): labels, multiword tokens, reading
running text in linear time, and its place in a tagger file. Models are tiny (a few EWT
sentences, a GRU of a few units) so that the tests take seconds."""

from __future__ import annotations

import pytest
import torch
from conftest import conllu_source, export_argv, first_sentences, tiny_bilstm_tagger

from inn.data.documents import raw_to_conllu, write_text
from inn.errors import InnError
from inn.experiment.cli import main
from inn.segmenter import CharTagger, MultiwordSplitter, Segmenter, TrainSettings, segmenter_data, train_segmenter
from inn.segmenter.model import CONTEXT, INSIDE, SENTENCE_END, TOKEN_END, WINDOW
from inn.tagger import Tagger

FRENCH = """# newdoc id = a
# text = Il parle du chat.
1\tIl\til\tPRON\t_\t_\t2\tnsubj\t_\t_
2\tparle\tparler\tVERB\t_\t_\t0\troot\t_\t_
3-4\tdu\t_\t_\t_\t_\t_\t_\t_\t_
3\tde\tde\tADP\t_\t_\t5\tcase\t_\t_
4\tle\tle\tDET\t_\t_\t5\tdet\t_\t_
5\tchat\tchat\tNOUN\t_\t_\t2\tobl\t_\tSpaceAfter=No
6\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

# text = Il va au marché du coin.
1\tIl\til\tPRON\t_\t_\t2\tnsubj\t_\t_
2\tva\taller\tVERB\t_\t_\t0\troot\t_\t_
3-4\tau\t_\t_\t_\t_\t_\t_\t_\t_
3\tà\tà\tADP\t_\t_\t5\tcase\t_\t_
4\tle\tle\tDET\t_\t_\t5\tdet\t_\t_
5\tmarché\tmarché\tNOUN\t_\t_\t2\tobl\t_\t_
6-7\tdu\t_\t_\t_\t_\t_\t_\t_\t_
6\tde\tde\tADP\t_\t_\t8\tcase\t_\t_
7\tle\tle\tDET\t_\t_\t8\tdet\t_\t_
8\tcoin\tcoin\tNOUN\t_\t_\t5\tnmod\t_\tSpaceAfter=No
9\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

"""


def _whitespace_segmenter(multiword: MultiwordSplitter, language: str = "fr") -> Segmenter:
    """A segmenter whose network always says INSIDE: tokens end at whitespace, sentences at paragraphs."""
    chars = ["<pad>", "<unk>", " ", "\n", "a"]
    model = CharTagger(len(chars), 4, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.out.bias[:] = torch.tensor([10.0, 0.0, 0.0])
    return Segmenter(chars, model, multiword, {"language": language})


def test_labels_mark_token_and_sentence_ends_from_the_text():
    data = segmenter_data(FRENCH, "fr.conllu")
    first = "Il parle du chat."
    assert data.text.startswith(first + " Il va au")
    labels = data.labels[: len(first)].tolist()
    ends = [i for i, label in enumerate(labels) if label in (TOKEN_END, SENTENCE_END)]
    assert [first[i] for i in ends] == ["l", "e", "u", "t", "."]  # Il parle du chat .
    assert labels[len(first) - 1] == SENTENCE_END and labels[0] == INSIDE
    assert ("du", ["de", "le"]) in data.tokens and ("chat", ["chat"]) in data.tokens
    assert data.left_out == 0


def test_a_file_without_text_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "bare.conllu"
    path.write_text("\n".join(line for line in FRENCH.split("\n") if not line.startswith("# text")), encoding="utf-8")
    assert main(["train-segmenter", str(path), "--out", str(tmp_path / "s.pt")]) != 0
    assert "no '# text' lines" in capsys.readouterr().err
    assert not (tmp_path / "s.pt").exists()


def test_multiword_tokens_from_the_dictionary_in_the_token_case():
    splitter = MultiwordSplitter.learn(segmenter_data(FRENCH, "fr").tokens)
    assert splitter.split("du") == [(0, 2, "de"), (0, 2, "le")]
    assert splitter.split("Au") == [(0, 2, "À"), (0, 2, "le")]
    assert splitter.split("chat") == [(0, 4, "chat")]


def test_an_unseen_form_gets_the_rule_of_its_affix():
    tokens = [
        ("don't", ["do", "n't"]),
        ("won't", ["wo", "n't"]),
        ("can't", ["ca", "n't"]),
        ("isn't", ["is", "n't"]),
        ("לישראל", ["ל", "ישראל"]),
        ("לבית", ["ל", "בית"]),
        ("לא", ["לא"]),
        ("front", ["front"]),
    ]
    splitter = MultiwordSplitter.learn(tokens)
    assert splitter.split("Shan't") == [(0, 3, "Sha"), (3, 6, "n't")]  # unseen: the suffix rule
    assert splitter.split("לירושלים") == [(0, 1, "ל"), (1, 8, "ירושלים")]  # unseen: the prefix rule
    assert splitter.split("לא") == [(0, 2, "לא")]  # seen as one word
    assert splitter.split("font") == [(0, 4, "font")]  # no rule for its affixes: one word
    assert MultiwordSplitter.from_dict(splitter.to_dict()).split("Shan't") == splitter.split("Shan't")


def test_running_text_gets_multiword_ranges_and_its_offsets():
    segmenter = _whitespace_segmenter(MultiwordSplitter.learn(segmenter_data(FRENCH, "fr").tokens))
    text = "Il parle du chat.\n\nAu revoir"
    sentences = segmenter.split(text)
    assert [s.text for s in sentences] == ["Il parle du chat.", "Au revoir"]
    assert [w.form for w in sentences[0].words] == ["Il", "parle", "de", "le", "chat."]
    token = sentences[0].tokens[2]
    assert (token.form, token.start, token.end) == ("du", 9, 11)
    conllu = write_text(raw_to_conllu(sentences), [["X"] * len(s.words) for s in sentences], "conllu", "upos")
    assert "3-4\tdu\t" in conllu and "\n3\tde\t" in conllu and "\n1-2\tAu\t" in conllu


def test_reading_is_linear_fixed_windows_in_batches(monkeypatch):
    segmenter = _whitespace_segmenter(MultiwordSplitter({}, [], {}))
    shapes = []
    forward = segmenter.model.forward
    monkeypatch.setattr(segmenter.model, "forward", lambda ids: shapes.append(tuple(ids.shape)) or forward(ids))
    for n in (10, 5 * WINDOW + 7):
        shapes.clear()
        probs = segmenter.label_probabilities("a " * (n // 2) + "a" * (n % 2))
        assert probs.shape == (n, 2)
        assert {width for _, width in shapes} == {WINDOW + 2 * CONTEXT}
        assert sum(b for b, _ in shapes) == -(-n // WINDOW)  # each character read in one window's middle
        assert max(b for b, _ in shapes) <= segmenter.batch_size


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, ewt_dir):
    """A segmenter of 60 EWT sentences (two epochs, a GRU of 8 units) and its file."""
    root = tmp_path_factory.mktemp("segmenter")
    train_file = root / "train.conllu"
    train_file.write_text(first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 60), encoding="utf-8")
    assert (
        main(
            [
                "train-segmenter",
                str(train_file),
                "--out",
                str(root / "seg.pt"),
                "--epochs",
                "2",
                "--hidden",
                "8",
                "--language",
                "en",
                "--threads",
                "1",
            ]
        )
        == 0
    )
    return root


def test_a_tiny_segmenter_trains_and_keeps_every_character(tiny):
    data = segmenter_data((tiny / "train.conllu").read_text(encoding="utf-8"), "train")
    segmenter = train_segmenter(data, TrainSettings(epochs=1, hidden=4, embedding=4), dev=data)
    assert segmenter.meta["settings"]["epochs"] == 1 and segmenter.meta["minutes"] >= 0
    text = data.text[:500]
    sentences = segmenter.split(text)
    for sentence in sentences:
        for token in sentence.tokens:
            assert token.form == text[token.start : token.end]
    joined = "".join(t.form for s in sentences for t in s.tokens)
    assert joined == "".join(text.split())


def test_a_tagger_file_with_a_segmenter_reads_running_text(tmp_path_factory, tiny, ewt_dir, capsys):
    root = tmp_path_factory.mktemp("tagger")
    for split in ("dev", "test"):  # copies: one file as two splits is refused
        (root / f"{split}.conllu").write_bytes((tiny / "train.conllu").read_bytes())
    source = conllu_source(tiny / "train.conllu", root / "dev.conllu", root / "test.conllu")
    features = {"max_words": 500, "max_affixes": 50, "word_dim": 4, "affix_dim": 2}
    checkpoint = str(tiny_bilstm_tagger(root, source, features, 4, max_train=60, max_dev=10))
    assert main(export_argv(checkpoint, root / "plain.pt")) == 0
    assert main(export_argv(checkpoint, root / "tagger.pt", "--segmenter", tiny / "seg.pt")) == 0
    tagger = Tagger.load(root / "tagger.pt", device="cpu")
    state = Segmenter.from_dict(torch.load(tiny / "seg.pt", weights_only=True)["segmenter"])
    text = "I don't know. She left at 5 pm!\n\nThanks"
    assert tagger.segmenter is not None
    assert (tagger.segmenter.label_probabilities(text) == state.label_probabilities(text)).all()
    assert tagger.tokenizer() is tagger.segmenter and tagger.tokenizer(route="rules") is not tagger.segmenter
    learned = tagger.tag_text(text, route="learned")
    assert learned and all(len(s.tags) == len(s.words) for s in learned)
    assert "".join(t.form for s in learned for t in s.tokens) == "".join(text.split())
    with pytest.raises(InnError, match="holds no segmenter: add one with inn export-tagger --segmenter"):
        Tagger.load(root / "plain.pt", device="cpu").tokenizer(route="learned")
    text_file = tmp_path_factory.mktemp("text") / "in.txt"
    text_file.write_text(text, encoding="utf-8")
    assert (
        main(
            [
                "tag",
                str(root / "tagger.pt"),
                str(text_file),
                "--input",
                "text",
                "--tokenizer",
                "learned",
                "--out",
                str(root / "out.conllu"),
            ]
        )
        == 0
    )
    assert "# text = " in (root / "out.conllu").read_text(encoding="utf-8")
    assert main(export_argv(checkpoint, root / "bad.pt", "--segmenter", checkpoint)) != 0
    assert "is not a segmenter file" in capsys.readouterr().err
    french = tmp_path_factory.mktemp("fr") / "fr.pt"
    torch.save({"format": 1, "segmenter": {**state.to_dict(), "meta": {"language": "fr"}}}, french)
    assert main(export_argv(checkpoint, root / "bad.pt", "--segmenter", french)) != 0
    assert "segments fr text but the tagger reads en" in capsys.readouterr().err
    assert not (root / "bad.pt").exists()
