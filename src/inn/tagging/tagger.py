"""Tag new text with a trained model: :class:`Tagger`, what ``inn tag`` runs.

A tagger file (a POS ``checkpoint.pt`` the workflow trained, or the ``tagger.pt`` exported
beside its evaluation) holds everything tagging needs: the weights, the feature vocabularies,
the tag set and the CoNLL-U column it predicts (:mod:`inn.checkpoints`). So::

    tagger = Tagger.load("results/taggers/pos/ewt/inn/seed1/tagger.pt")
    tagger.tag([["The", "cat", "sleeps"]])          # [["DT", "NN", "VBZ"]]
    tagger.tag_conllu(open("in.conllu").read())     # the same text, its XPOS column filled
    for sentence in tagger.tag_text("I'm here (again). Bye!"):   # running text
        [(w.form, w.start, w.end, tag) for w, tag in zip(sentence.words, sentence.tags)]

Neural models tag in batches of similar length (those of ``inn evaluate``, so the same
sentences get the same tags), without autograd, on CUDA when present; the implicit layer's
solves that miss their tolerance are counted (:attr:`Tagger.nonconverged`), never silent.

Running text (:meth:`Tagger.tag_text`) is split into sentences and words by the segmenter the
tagger file holds, learned from its treebank's text (:mod:`inn.tagging.segmenter`, written there by
``inn export-tagger --segmenter``), else by the rules of the tagger's language in its corpus's
conventions (:mod:`inn.tagging.tokenize`); ``route`` chooses where a file has both. A language
with neither is refused by name.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch

from inn.checkpoints import COLUMNS, OWN_DIGEST, model_from_payload, read_checkpoint, self_contained, weights_digest
from inn.data.corpora import PTB_FORMATS
from inn.data.features import FeatureExtractor
from inn.errors import InnError
from inn.models import predict
from inn.tagging.documents import TextSentence, read_text, write_text
from inn.tagging.english import ptb_escapes
from inn.tagging.scoring import score_pos
from inn.tagging.segmenter import Segmenter
from inn.tagging.tokenize import RawSentence, Tokenizer, tokenizer_for

log = logging.getLogger(__name__)

#: the workflow's own corpora, whose tagger files from before ``language`` and ``format`` were
#: recorded are still known: corpus -> (language, convention)
BUILTIN_CORPORA = {"ewt": ("en", "ud"), "ptb_sample": ("en", "ptb"), "wsj": ("en", "ptb")}
#: a text looks foreign to a tagger when its share of unseen words exceeds its dev set's by more
#: than the dev share itself and by at least this much (EWT: 6.8% -> above 21.8%)
FOREIGN_MARGIN = 0.15
#: the threshold for tagger files that do not record their dev set's unseen share (older exports)
FOREIGN_FALLBACK = 0.30
#: the fewest words on which a text is judged foreign
FOREIGN_MIN_WORDS = 100
#: who splits running text: ``auto`` (the file's segmenter where it holds one for the language,
#: else the rules), ``learned`` (the segmenter) or ``rules``
ROUTES = ("auto", "learned", "rules")


class Tagger:
    """A trained POS model (neural or the perceptron) with its vocabularies and tag column.

    Attributes:
        meta: what the file says of the model: corpus (``dataset``), model, seed, scale,
            training settings, dev and (exported files) test scores.
        column: the CoNLL-U column it fills, ``xpos`` or ``upos``.
        nonconverged: implicit solves that missed their tolerance, over all calls so far.
    """

    def __init__(
        self,
        model: Any,
        features: FeatureExtractor,
        column: str,
        meta: dict[str, Any],
        device: torch.device,
        batch_size: int = 20,
    ) -> None:
        self.model = model
        self.features = features
        self.column = column
        self.meta = meta
        self.device = device
        self.batch_size = batch_size
        self.nonconverged = 0
        #: the SHA-256 of its weights (:func:`inn.checkpoints.weights_digest`), which its test score names
        self.weights_sha256: str | None = None
        #: what the file's ``data`` section says of the corpus (format, language, dev_unseen, corpus)
        self.data: dict[str, Any] = {}
        self._tokenizers: dict[str, Tokenizer] = {}
        #: the tokenizer, sentence splitter and multiword splitter learned with it, if its file holds one
        self.segmenter: Segmenter | None = None
        self._escapes: dict[str, str] | None = None  # brackets as its corpus writes them (model_words)

    @classmethod
    def load(cls, path: str | os.PathLike, device: str = "auto", batch_size: int = 20) -> Tagger:
        """Read a tagger file (``torch.load(weights_only=True)``: it cannot run code).

        Args:
            device: ``auto`` (CUDA when present), ``cpu`` or ``cuda``.
            batch_size: sentences per batch; 20, as evaluation uses, gives its exact tags.

        Raises:
            InnError: the file is missing or unreadable, not a POS model, from an inn whose
                files this one cannot read, or a checkpoint from before tagger files (the
                message says how to convert it).
        """
        from inn.device import resolve_device

        dev = resolve_device(device)
        payload = self_contained(read_checkpoint(path, dev), path)
        model, meta = model_from_payload(payload, path, dev)
        data = payload["data"]
        _check_fit(payload, path)
        features = FeatureExtractor.from_dict(data["vocabularies"])
        if data.get("column") not in COLUMNS:
            raise InnError(f"{path}: unknown tag column {data.get('column')!r} in its data section")
        tagger = cls(model, features, data["column"], meta, dev, batch_size)
        tagger.weights_sha256 = payload.get(OWN_DIGEST) or weights_digest(payload)  # checked when read
        tagger.data = {k: data.get(k) for k in ("corpus", "format", "language", "dev_unseen")}
        if payload.get("segmenter") is not None:
            tagger.segmenter = _segmenter(payload["segmenter"], path)
        test = meta.get("test")
        scored = test.get("weights_sha256") if isinstance(test, dict) else None
        if scored is not None and scored != tagger.weights_sha256:
            log.warning(
                "%s: its test score was measured on other weights (sha256 %s...) than it holds", path, scored[:16]
            )
        return tagger

    @property
    def is_perceptron(self) -> bool:
        return bool(getattr(self.model, "is_perceptron", False))

    @property
    def tags(self) -> list[str]:
        """The tag set, in the model's order."""
        return list(self.features.tags.items)

    @property
    def corpus(self) -> str | None:
        return self.data.get("corpus") or self.meta.get("dataset")

    @property
    def language(self) -> str | None:
        """The language of its corpus (an ISO 639 code), or ``None`` where the file does not say:
        as recorded, else ``en`` for a Penn Treebank format or one of the workflow's own corpora."""
        if self.data.get("language"):
            return self.data["language"]
        if self.data.get("format") in PTB_FORMATS:
            return "en"
        return BUILTIN_CORPORA.get(self.corpus or "", (None, None))[0]

    @property
    def convention(self) -> str:
        """How its corpus writes words: ``ptb`` (escaped brackets, PTB quotes) or ``ud``."""
        if self.data.get("format"):
            return "ptb" if self.data["format"] in PTB_FORMATS else "ud"
        return BUILTIN_CORPORA.get(self.corpus or "", (None, "ud"))[1]

    def tokenizer(self, language: str | None = None, route: str = "auto") -> Tokenizer | Segmenter:
        """What splits running text in ``language`` (default: its corpus's): its learned
        segmenter, for its own language, unless ``route`` is ``rules`` (:data:`ROUTES`); else
        the rules of the language in its corpus's conventions, with its training vocabulary
        (:mod:`inn.tagging.tokenize`). The learned segmenter scores above the English rules on
        EWT (docs/tagging.md, "Learned segmenters").

        Raises:
            InnError: ``learned`` and no segmenter for the language; no tokenizer for the
                language, or the language is unknown.
        """
        language = language or self.language
        own = self.segmenter is not None and _same_language(language, self.segmenter.language or self.language)
        if route == "learned" and not own:
            held = (
                f"its segmenter reads {self.segmenter.language or self.language}"
                if self.segmenter
                else "its file holds no segmenter: add one with inn export-tagger --segmenter"
            )
            raise InnError(
                f"no learned segmenter for language {language!r} in the {self.meta.get('model')} tagger "
                f"of {self.corpus} ({held})"
            )
        if own and route != "rules":
            return self.segmenter
        key = str(language)
        if key not in self._tokenizers:
            self._tokenizers[key] = tokenizer_for(
                language,
                self.convention,
                self.features.word_counts,
                f"the {self.meta.get('model')} tagger of {self.corpus}",
            )
        return self._tokenizers[key]

    def model_words(self, words: Sequence[str]) -> list[str]:
        """``words`` as its corpus writes them: brackets escaped (``-LRB-``) for a Penn Treebank
        corpus, unchanged otherwise."""
        if self.convention != "ptb":
            return list(words)
        if self._escapes is None:
            self._escapes = ptb_escapes(self.features.word_counts)
        return [self._escapes.get(w, w) for w in words]

    def tag_text(
        self, text: str, language: str | None = None, progress: bool = False, route: str = "auto"
    ) -> list[RawSentence]:
        """Tag running text: its sentences, each with its tokens, its words (each with its form as
        written and its character offsets in ``text``) and one tag per word in ``tags``.

        Args:
            language: the text's language (default: its corpus's, :attr:`language`).
            route: who splits it (:data:`ROUTES`, :meth:`tokenizer`).

        Raises:
            InnError: no tokenizer for the language.
        """
        sentences = self.tokenizer(language, route).split(text)
        tags = self._tag_model_words([[w.model_form for w in s.words] for s in sentences], progress)
        for sentence, sentence_tags in zip(sentences, tags):
            sentence.tags = sentence_tags
        return sentences

    def unseen_share(self, sentences: Sequence[Sequence[str]]) -> float | None:
        """The share of words training never showed (lowercased, as unseen-word accuracy counts)."""
        words = [w for words in sentences for w in self.model_words(words)]
        return sum(not self.features.is_known(w) for w in words) / len(words) if words else None

    def foreign(self, share: float | None, words: int) -> str | None:
        """A warning when a text's unseen-word ``share`` (of ``words`` words) is far above its dev
        set's (:data:`FOREIGN_MARGIN`), else ``None``."""
        if share is None or words < FOREIGN_MIN_WORDS:
            return None
        dev = self.data.get("dev_unseen")
        if dev is None:
            limit = FOREIGN_FALLBACK
            basis = (
                f"more than {limit:.0%}; the tagger file does not record its dev set's share: export it again "
                "with inn export-tagger to record it"
            )
        else:
            limit = dev + max(dev, FOREIGN_MARGIN)
            basis = f"its dev set's {dev:.1%}"
        if share <= limit:
            return None
        return (
            f"{share:.1%} of the {words} words are unseen in the {self.meta.get('model')} tagger's training "
            f"({basis}): the text looks foreign to a tagger of {self.corpus} (language "
            f"{self.language or 'not recorded'}); expect low accuracy"
        )

    def tag(self, sentences: Sequence[Sequence[str]], progress: bool = False) -> list[list[str]]:
        """One tag per word of every sentence (a list of words each); empty sentences stay empty.
        Words are read as its corpus writes them (:meth:`model_words`).

        ``progress``: a progress bar over the batches (on a terminal).
        """
        return self._tag_model_words([self.model_words(words) for words in sentences], progress)

    def _tag_model_words(self, sentences: Sequence[Sequence[str]], progress: bool = False) -> list[list[str]]:
        sentences = [list(words) for words in sentences]
        if self.is_perceptron:
            return self.model.tag_sentences(sentences)
        index = [i for i, words in enumerate(sentences) if words]
        tags: list[list[str]] = [[] for _ in sentences]
        if not index:
            return tags
        examples = []
        for i in index:
            encoded = self.features.encode(sentences[i])
            examples.append({"words": encoded.words, "affixes": encoded.affixes, "shapes": encoded.shapes})
        labels, _, failed = predict(self.model, examples, self.batch_size, self.device, progress)
        self.nonconverged += failed
        names = self.tags
        for i, row in zip(index, labels):
            tags[i] = [names[t] for t in row.tolist()]
        return tags

    def tag_conllu(self, text: str, column: str | None = None) -> str:
        """CoNLL-U ``text`` with its ``column`` (default: the model's) filled for every
        syntactic word; every other line and column is unchanged."""
        sentences, _ = read_text(text.encode("utf-8"), "<text>", "conllu")
        return write_text(sentences, self.tag([s.words for s in sentences]), "conllu", column or self.column)

    def accuracy(
        self,
        sentences: Sequence[TextSentence],
        predicted: Sequence[Sequence[str]],
        column: str | None = None,
        sources: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Token and unseen-word accuracy (%) of ``predicted`` against the gold tags in the
        CoNLL-U ``column`` of ``sentences``, scored as ``inn evaluate`` scores a split; and what
        it cannot score: ``unseen_share`` (the words training never showed, beside the dev
        set's ``dev_unseen_share``), ``tags_outside`` (gold tags outside the model's tag set, by
        count: those tokens can never be right) and ``outside_tokens``. ``sources``: each
        sentence's file, for messages.

        Raises:
            InnError: a word has no gold tag in that column (naming its line).
        """
        column = column or self.column
        gold = []
        for s, sentence in enumerate(sentences):
            tags = sentence.column(column)
            for tag, number in zip(tags, sentence.line_numbers):
                if tag == "_":
                    source = sources[s] if sources is not None else "<text>"
                    raise InnError(
                        f"{source}:{number}: no gold {column.upper()} tag to score against "
                        f"(--accuracy needs the gold tags in the {column.upper()} column)"
                    )
            gold.append(list(zip(sentence.words, tags)))
        metrics, _ = score_pos(gold, predicted, self.features.is_known)
        scores = {k: metrics[k] for k in ("accuracy", "unseen_accuracy", "tokens", "unseen_tokens", "sentences")}
        known = set(self.tags)
        outside: dict[str, int] = {}
        for sentence in gold:
            for _, tag in sentence:
                if tag not in known:
                    outside[tag] = outside.get(tag, 0) + 1
        scores["unseen_share"] = scores["unseen_tokens"] / scores["tokens"]
        scores["dev_unseen_share"] = self.data.get("dev_unseen")
        scores["tags_outside"] = dict(sorted(outside.items(), key=lambda kv: (-kv[1], kv[0])))
        scores["outside_tokens"] = sum(outside.values())
        return scores

    def describe(self) -> str:
        """One line: model, corpus, seed, tag column and its scores."""
        meta = self.meta
        scores = ", ".join(
            f"{split} {meta[split]['accuracy']:.2f}%"
            for split in ("dev", "test")
            if isinstance(meta.get(split), dict) and meta[split].get("accuracy") is not None
        )
        digest = f"; weights sha256 {self.weights_sha256}" if self.weights_sha256 else ""
        return (
            f"{meta.get('model')} tagger of {meta.get('dataset')} (seed {meta.get('seed')}, scale "
            f"{meta.get('scale')}), {len(self.tags)} {self.column.upper()} tags"
            + (f"; {scores}" if scores else "")
            + digest
        )


def _check_fit(payload: dict[str, Any], path: str | os.PathLike) -> None:
    """Refuse a neural tagger file whose vocabularies do not fit its layers (a tag list shorter
    than its output layer would index past it while tagging), naming the mismatch."""
    cfg = payload.get("model_config")
    if cfg is None:
        return  # the perceptron keeps its own classes
    fix = "the file is damaged or was edited; export it again from its checkpoint with `inn export-tagger`"
    try:
        vocabularies = payload["data"]["vocabularies"]
        sizes = (
            len(vocabularies["tags"]),
            len(vocabularies["words"]),
            [len(v) for v in vocabularies["affixes"].values()],
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise InnError(f"{path}: its feature vocabularies are incomplete (no {exc}): {fix}") from None
    wrong = []
    if sizes[0] != cfg["num_classes"]:
        wrong.append(f"{sizes[0]} tags for an output layer of {cfg['num_classes']}")
    if sizes[1] != cfg["word_vocab"]:
        wrong.append(f"{sizes[1]} words for a word embedding of {cfg['word_vocab']}")
    if sizes[2] != list(cfg["affix_vocab"]):
        wrong.append(f"affix vocabularies of {sizes[2]} for embeddings of {list(cfg['affix_vocab'])}")
    if wrong:
        raise InnError(f"{path}: its vocabularies do not fit its model ({'; '.join(wrong)}): {fix}")


def _base(language: str | None) -> str | None:
    """An ISO 639 code without its region (``en_US`` -> ``en``), lowercased."""
    return language.lower().split("_")[0].split("-")[0] if language else None


def _same_language(a: str | None, b: str | None) -> bool:
    return a is None or b is None or _base(a) == _base(b)


def _segmenter(state: Any, path: str | os.PathLike) -> Segmenter:
    """The segmenter section of a tagger file, or one line when it is damaged."""
    try:
        return Segmenter.from_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise InnError(
            f"{path}: its segmenter section is damaged ({type(exc).__name__}: {exc}): export the tagger "
            "again with inn export-tagger --segmenter"
        ) from None
