"""Input features: shape flags on hand-made words, affixes, vocabularies, unknowns, persistence."""

from __future__ import annotations

import pytest
import torch

from inn.data.features import AFFIX_KINDS, PAD, SHAPE_FEATURES, UNK, FeatureExtractor, affixes, shape_features

NAMES = [name for name, _ in SHAPE_FEATURES]


def flags(word: str) -> set[str]:
    return {name for name, on in zip(NAMES, shape_features(word)) if on}


@pytest.mark.parametrize(
    "word, expected",
    [
        ("1,000", {"is_number", "has_digit"}),
        ("3.14", {"is_number", "has_digit"}),
        ("-5", {"is_number", "has_digit", "has_hyphen"}),
        ("1980s", {"is_number", "has_digit"}),
        ("B-52", {"has_digit", "has_hyphen", "all_caps"}),
        ("well-known", {"has_hyphen"}),
        ("IBM", {"all_caps"}),
        ("Paris", {"initial_cap"}),
        ("McDonald", {"initial_cap", "inner_cap"}),
        ("iPhone", {"inner_cap"}),
        ("cat", set()),
        (",", {"is_punctuation"}),
        ("...", {"is_punctuation"}),
        ("-", {"is_punctuation"}),
        ("$", {"has_symbol"}),
        ("%", {"is_punctuation"}),
        ("US$", {"has_symbol", "all_caps"}),
        ("+", {"has_symbol"}),
    ],
)
def test_shape_features_on_hand_made_words(word, expected):
    assert flags(word) == expected


def test_eight_shape_features_and_paper_size():
    assert len(SHAPE_FEATURES) == 8
    assert FeatureExtractor().feature_size == 448  # 320 + 6 * 20 + 8


def test_affixes_are_lower_cased_and_short_words_have_none():
    assert affixes("Running") == ("ru", "run", "runn", "ng", "ing", "ning")
    assert affixes("Go") == ("go", "", "", "go", "", "")


TRAIN = [
    [("The", "DT"), ("cats", "NNS"), ("ran", "VBD"), (".", ".")],
    [("the", "DT"), ("dog", "NN"), ("running", "VBG"), (".", ".")],
    [("THE", "DT"), ("cat", "NN"), ("ran", "VBD")],
]


def test_vocabularies_rank_by_frequency_and_cap_size():
    fx = FeatureExtractor(max_words=3, max_affixes=2, word_dim=4, affix_dim=2).fit(TRAIN)
    assert fx.words.items == ["<pad>", "<unk>", "the", ".", "ran"]  # the:3, .:2, ran:2 (ties by name)
    assert all(len(v) == 2 + 2 for v in fx.affixes.values())
    assert fx.tags.items == [".", "DT", "NN", "NNS", "VBD", "VBG"]
    assert fx.feature_size == 4 + 6 * 2 + 8


def test_encode_maps_unseen_words_and_affixes_to_unknown():
    fx = FeatureExtractor(max_words=100, max_affixes=100).fit(TRAIN)
    enc = fx.encode(["The", "zebra", "Running", "a"])
    assert enc.words.tolist()[0] == fx.words.lookup("the") and enc.words[1] == UNK
    assert enc.words[2] == fx.words.lookup("running") != UNK
    assert enc.affixes.shape == (4, len(AFFIX_KINDS))
    assert (enc.affixes[1] == UNK).all()  # "ze", "zeb"... never seen
    assert (enc.affixes[3] == UNK).all()  # one letter: no affixes at all
    assert enc.shapes.shape == (4, 8) and enc.shapes.dtype == torch.float32
    assert PAD not in enc.words.tolist()
    assert fx.is_known("CATS") and not fx.is_known("zebra")


def test_encode_tags_rejects_unseen_tag():
    fx = FeatureExtractor().fit(TRAIN)
    assert fx.encode_tags(["DT", "NN"]).tolist() == [1, 2]
    with pytest.raises(Exception, match="'XX' does not occur in the training split"):
        fx.encode_tags(["XX"])


def test_save_load_round_trip(tmp_path):
    fx = FeatureExtractor(max_words=10, max_affixes=5, word_dim=8, affix_dim=3).fit(TRAIN)
    fx.save(tmp_path / "f.json")
    back = FeatureExtractor.load(tmp_path / "f.json")
    words = ["The", "Zebra", "runs", "1,000"]
    for a, b in zip(vars(fx.encode(words)).values(), vars(back.encode(words)).values()):
        assert torch.equal(a, b)
    assert back.feature_size == fx.feature_size and back.tags.items == fx.tags.items
