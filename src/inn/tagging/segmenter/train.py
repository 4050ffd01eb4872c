"""Training a :class:`~inn.tagging.segmenter.model.Segmenter` from a CoNLL-U file with its text.

The training text is the file's raw text as a UD release's ``.txt`` writes it
(:func:`inn.tagging.documents.conllu_to_text`: the ``# text`` lines, a blank line between
paragraphs, lines broken at 80 columns), so the network learns from text shaped like the text
it will read. Each character gets its label from the file's tokens, found in order in its
sentence's ``# text``; a sentence whose tokens do not spell its ``# text`` is left out of the
loss (counted in the log), never guessed at.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from inn.errors import InnError
from inn.tagging.documents import CONLLU_FIELDS, TextSentence, conllu_to_text, read_conllu_text
from inn.tagging.segmenter.model import (
    INSIDE,
    SENTENCE_END,
    TOKEN_END,
    CharTagger,
    Segmenter,
)
from inn.tagging.segmenter.multiword import MultiwordSplitter

log = logging.getLogger(__name__)

IGNORE = -100
_MISC = CONLLU_FIELDS.index("misc")


@dataclass
class SegmenterData:
    """A training file as the segmenter reads it: its raw ``text``, one label per character
    (``labels``, (n,), :data:`IGNORE` for whitespace and left-out sentences), its surface tokens
    with their words, and the sentences left out."""

    text: str
    labels: np.ndarray
    tokens: list[tuple[str, list[str]]]
    left_out: int


def surface_tokens(sentence: TextSentence) -> list[tuple[str, list[str]]]:
    """``(surface form, its words)`` of every token of a CoNLL-U sentence: a range line's form
    with the words it covers, or a word outside every range with itself."""
    out: list[tuple[str, list[str]]] = []
    last = 0  # the last word of the open range
    for fields in sentence.lines:
        if len(fields) == 1 or "." in fields[0]:
            continue
        if "-" in fields[0]:
            last = int(fields[0].split("-")[1])
            out.append((fields[1], []))
        elif int(fields[0]) <= last:
            out[-1][1].append(fields[1])
        else:
            out.append((fields[1], [fields[1]]))
    return [(form, words or [form]) for form, words in out]


def _sentence_text(sentence: TextSentence) -> str | None:
    for fields in sentence.lines:
        if len(fields) == 1 and fields[0].startswith("# text") and fields[0][6:].lstrip().startswith("="):
            return fields[0].split("=", 1)[1].strip()
    return None


def segmenter_data(conllu: str, source: str) -> SegmenterData:
    """The raw text of CoNLL-U ``conllu`` and its characters' labels (module docstring).

    Raises:
        InnError: the file is malformed (:func:`inn.tagging.documents.read_conllu_text`) or has no
            ``# text`` lines.
    """
    sentences = read_conllu_text(conllu, source)
    if not any(_sentence_text(s) is not None for s in sentences):
        raise InnError(
            f"{source}: no '# text' lines: a segmenter learns from the sentences' text; give a CoNLL-U "
            "file that has it (every UD treebank's does)"
        )
    text = conllu_to_text(conllu, source, 80)
    flat = text.replace("\n", " ")
    labels = np.full(len(text), IGNORE, dtype=np.int64)
    tokens: list[tuple[str, list[str]]] = []
    at, left_out = 0, 0
    for number, sentence in enumerate(sentences, start=1):
        said = _sentence_text(sentence)
        surface = surface_tokens(sentence)
        tokens += surface
        if said is None:
            said = "".join(
                form + ("" if "SpaceAfter=No" in _misc_of(sentence, i) else " ") for i, (form, _) in enumerate(surface)
            ).strip()
        while at < len(flat) and flat[at] == " ":
            at += 1
        if flat[at : at + len(said)] != said:
            raise InnError(f"{source}: the text of sentence {number} could not be found in its raw text")
        ends = _token_ends(said, [form for form, _ in surface])
        if ends is None:
            left_out += 1
        else:
            labels[at : at + len(said)] = [IGNORE if c == " " else INSIDE for c in said]
            labels[[at + e - 1 for e in ends]] = TOKEN_END
            labels[at + ends[-1] - 1] = SENTENCE_END
        at += len(said)
    return SegmenterData(text, labels, tokens, left_out)


def _misc_of(sentence: TextSentence, token: int) -> list[str]:
    """The MISC attributes of the ``token``-th surface token of ``sentence``."""
    rows = [f for f in sentence.lines if len(f) > 1 and "." not in f[0]]
    out, last = [], 0
    for fields in rows:
        if "-" in fields[0]:
            last = int(fields[0].split("-")[1])
            out.append(fields)
        elif int(fields[0]) > last:
            out.append(fields)
    return out[token][_MISC].split("|")


def _token_ends(text: str, forms: Sequence[str]) -> list[int] | None:
    """The end offset of each of ``forms`` found in order in ``text`` (spaces between them
    skipped), or ``None`` when they do not spell it."""
    ends, at = [], 0
    for form in forms:
        while at < len(text) and text[at] == " ":
            at += 1
        if not text.startswith(form, at):
            return None
        at += len(form)
        ends.append(at)
    return ends if ends and not text[at:].strip() else None


def char_vocabulary(text: str, min_count: int = 2) -> list[str]:
    """The characters seen at least ``min_count`` times (not whitespace), after the four
    reserved ids (:data:`~inn.tagging.segmenter.model.PAD` ...), most frequent first."""
    counts = Counter(c for c in text if not c.isspace())
    return ["<pad>", "<unk>", " ", "\n"] + [c for c, n in counts.most_common() if n >= min_count]


def boundary_f1(segmenter: Segmenter, data: SegmenterData) -> tuple[float, float]:
    """Token-end and sentence-end F1 (%) of ``segmenter``'s labels against ``data``'s, over
    the characters ``data`` labels."""
    probs = segmenter.label_probabilities(data.text)
    scored = data.labels != IGNORE
    out = []
    for column, gold in ((0, data.labels >= TOKEN_END), (1, data.labels == SENTENCE_END)):
        system = probs[:, column] > 0.5
        hits = (system & gold & scored).sum()
        guessed, wanted = (system & scored).sum(), (gold & scored).sum()
        out.append(float(200 * hits / (guessed + wanted)) if guessed + wanted else 100.0)
    return out[0], out[1]


@dataclass
class TrainSettings:
    """How a segmenter trains: ``epochs`` passes over the text in windows of ``window``
    characters, ``batch_size`` windows a step, Adam at ``lr``; a GRU of ``hidden`` units each way."""

    epochs: int = 20
    window: int = 100
    batch_size: int = 32
    lr: float = 3e-3
    hidden: int = 64
    embedding: int = 32
    dropout: float = 0.1
    seed: int = 1


def train_segmenter(
    data: SegmenterData,
    settings: TrainSettings,
    dev: SegmenterData | None = None,
    meta: dict[str, Any] | None = None,
    progress: bool = False,
    save: Callable[[Segmenter], None] | None = None,
) -> Segmenter:
    """A segmenter trained on ``data``; with ``dev``, the epoch of the best mean token- and
    sentence-end F1 on it is kept. ``save`` is called with the segmenter after every epoch
    that is the best so far (every epoch without ``dev``), so that a stopped training leaves
    its best model.

    Raises:
        InnError: the text is shorter than one training window.
    """
    from tqdm import tqdm

    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    began = time.perf_counter()
    chars = char_vocabulary(data.text)
    model = CharTagger(len(chars), settings.embedding, settings.hidden, settings.dropout)
    segmenter = Segmenter(chars, model, MultiwordSplitter.learn(data.tokens), meta)
    ids = segmenter.encode(data.text)
    labels = torch.from_numpy(data.labels)
    span = settings.window
    if len(ids) < span:
        raise InnError(f"the training text has {len(ids)} characters: a segmenter needs at least {span}")
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE)
    best, best_state = -1.0, None
    segmenter.meta.update(characters=len(data.text), left_out=data.left_out, settings=vars(settings))
    for epoch in range(1, settings.epochs + 1):
        model.train()
        starts = torch.from_numpy(rng.permutation(np.arange(int(rng.integers(span)), len(ids) - span + 1, span)))
        steps = math.ceil(len(starts) / settings.batch_size)
        bar = tqdm(
            starts.split(settings.batch_size),
            total=steps,
            desc=f"epoch {epoch}",
            unit="batch",
            disable=not progress,
            mininterval=1.0,
            leave=False,
        )
        total = 0.0
        for batch in bar:
            index = batch[:, None] + torch.arange(span)  # (B, window)
            optimizer.zero_grad()
            loss = loss_fn(model(ids[index]).reshape(-1, 3), labels[index].reshape(-1))
            loss.backward()
            optimizer.step()
            total += loss.item()
        model.eval()
        message = f"epoch {epoch}: loss {total / steps:.4f}"
        improved = dev is None
        if dev is not None:
            tokens, sentences = boundary_f1(segmenter, dev)
            message += f", dev token-end F1 {tokens:.2f}, sentence-end F1 {sentences:.2f}"
            if (tokens + sentences) / 2 > best:
                best, improved = (tokens + sentences) / 2, True
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
                segmenter.meta.update(dev_token_end_f1=round(tokens, 2), dev_sentence_end_f1=round(sentences, 2))
        minutes = (time.perf_counter() - began) / 60
        log.info("%s (%.1f min)", message, minutes)
        if improved:
            segmenter.meta.update(epoch=epoch, minutes=round(minutes, 2))
            if save is not None:
                save(segmenter)
    if best_state is not None:
        model.load_state_dict(best_state)
    return segmenter
