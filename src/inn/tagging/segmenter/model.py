"""A tokenizer and sentence splitter learned from a treebank: :class:`Segmenter`.

After UDPipe 1 (Straka & Straková 2017): a bidirectional GRU reads the text a character at a
time and labels each character: :data:`INSIDE` (the token goes on, or whitespace),
:data:`TOKEN_END` (a token ends after it) or :data:`SENTENCE_END` (a token and its sentence
end after it). Whitespace always ends a token and a blank line always ends a sentence (a
paragraph break); the network decides the rest (``don't.`` -> ``don't`` ``.``; ``Mr. Smith``
goes on). Each token is then split into its syntactic words by the
:class:`~inn.tagging.segmenter.multiword.MultiwordSplitter` learned from the same treebank.

The text is read in overlapping windows of :data:`WINDOW` characters (:data:`CONTEXT` more on
either side), batched, so reading is linear in the text's length and its memory bounded by
the batch; each character's label comes from the window whose middle holds it.
"""

from __future__ import annotations

import logging
import re
from itertools import pairwise
from typing import Any

import numpy as np
import torch
from torch import nn

from inn.tagging.segmenter.multiword import MultiwordSplitter
from inn.tagging.sentences import paragraphs
from inn.tagging.tokenize import RawSentence, Token, Word

log = logging.getLogger(__name__)

INSIDE, TOKEN_END, SENTENCE_END = 0, 1, 2
#: characters whose label one window gives; and the context read on either side of them
WINDOW, CONTEXT = 400, 50
#: the character ids every vocabulary starts with: padding, an unknown character, a space, a line break
PAD, UNKNOWN, SPACE, NEWLINE = 0, 1, 2, 3
_SPACES = re.compile(r"\s")


class CharTagger(nn.Module):
    """Character embeddings, a bidirectional GRU and a linear layer to the three labels.

    ``forward``: character ids (B, n) -> label scores (B, n, 3).
    """

    def __init__(self, chars: int, embedding: int = 32, hidden: int = 64, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Embedding(chars, embedding, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        self.gru = nn.GRU(embedding, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        states, _ = self.gru(self.dropout(self.embed(ids)))  # (B, n, 2H)
        return self.out(states)  # (B, n, 3)


class Segmenter:
    """Running text -> sentences, tokens and words, as the treebank it learned from writes them.

    ``split`` has :meth:`inn.tagging.tokenize.Tokenizer.split`'s contract: every offset indexes
    the text; a multiword token's words that are not stretches of it (``du`` -> ``de`` ``le``)
    span the whole token.

    Args:
        chars: the character vocabulary, in id order (the first four are :data:`PAD` ...).
        model: the character tagger.
        multiword: the multiword-token splitter.
        meta: what training recorded (corpus, language, sizes, minutes).
    """

    def __init__(
        self, chars: list[str], model: CharTagger, multiword: MultiwordSplitter, meta: dict[str, Any] | None = None
    ) -> None:
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}
        self.model = model.eval()
        self.multiword = multiword
        self.meta = dict(meta or {})
        self.batch_size = 32

    @property
    def language(self) -> str | None:
        return self.meta.get("language")

    def encode(self, text: str) -> torch.Tensor:
        """Character ids of ``text`` (n,): a line break and other whitespace have ids of their own."""
        ids = [self.index.get(c, UNKNOWN) for c in text]
        out = torch.tensor(ids, dtype=torch.long)
        if not len(text):
            return out
        spaces = torch.tensor([c.isspace() for c in text])
        newline = torch.tensor([c == "\n" for c in text])
        out[spaces] = SPACE
        out[newline] = NEWLINE
        return out

    @torch.no_grad()
    def label_probabilities(self, text: str) -> np.ndarray:
        """P(token end) and P(sentence end) after every character of ``text``: (n, 2)."""
        ids = self.encode(text)
        n = len(ids)
        if n == 0:
            return np.zeros((0, 2), dtype=np.float32)
        windows = -(-n // WINDOW)
        padded = torch.full((windows * WINDOW + 2 * CONTEXT,), PAD, dtype=torch.long)
        padded[CONTEXT : CONTEXT + n] = ids
        frames = padded.unfold(0, WINDOW + 2 * CONTEXT, WINDOW)  # (windows, WINDOW + 2 CONTEXT)
        probs = []
        for batch in frames.split(self.batch_size):
            p = self.model(batch).softmax(-1)[:, CONTEXT : CONTEXT + WINDOW]  # (B, WINDOW, 3)
            probs.append(p.reshape(-1, 3))
        p = torch.cat(probs)[:n]
        token_end = p[:, TOKEN_END] + p[:, SENTENCE_END]
        return torch.stack([token_end, p[:, SENTENCE_END]], 1).numpy()

    def split(self, text: str) -> list[RawSentence]:
        """The sentences of ``text`` with their tokens and words (each word's offsets in ``text``)."""
        probs = self.label_probabilities(text)
        sentences: list[RawSentence] = []
        for start, end in paragraphs(text):
            sentences += self._paragraph(text, start, end, probs)
        return sentences

    def _paragraph(self, text: str, start: int, end: int, probs: np.ndarray) -> list[RawSentence]:
        """The sentences of the paragraph ``text[start:end]``: tokens end at whitespace and where
        P(token end) > 1/2, sentences where P(sentence end) > 1/2 and at the paragraph's end."""
        space = _space_mask(text[start:end])
        p = probs[start:end]
        ends = ~space & ((p[:, 0] > 0.5) | (p[:, 1] > 0.5) | np.append(space[1:], True))
        starts = ~space & np.insert(ends[:-1] | space[:-1], 0, True)
        token_starts = np.flatnonzero(starts)
        token_ends = np.flatnonzero(ends) + 1
        closes = p[token_ends - 1, 1] > 0.5
        closes[-1:] = True
        sentences: list[RawSentence] = []
        tokens: list[Token] = []
        for a, b, close in zip(token_starts.tolist(), token_ends.tolist(), closes.tolist()):
            tokens.append(self._token(text, start + a, start + b))
            if close:
                sentences.append(self._sentence(text, tokens, new_paragraph=not sentences))
                tokens = []
        return sentences

    def _token(self, text: str, a: int, b: int) -> Token:
        """The token ``text[a:b]`` with its words (:class:`~inn.tagging.segmenter.multiword.MultiwordSplitter`)."""
        form = text[a:b]
        words = [Word(w, a + s, a + e, w) for s, e, w in self.multiword.split(form)]
        return Token(words) if "".join(w.form for w in words) == form else SurfaceToken(words, form)

    @staticmethod
    def _sentence(text: str, tokens: list[Token], new_paragraph: bool) -> RawSentence:
        for token, after in pairwise(tokens):
            token.space_after = after.start > token.end
        last = tokens[-1]
        last.space_after = last.end >= len(text) or text[last.end].isspace()
        start, end = tokens[0].start, tokens[-1].end
        return RawSentence(tokens, " ".join(text[start:end].split()), new_paragraph)

    # ----------------------------------------------------------------------- storage

    def to_dict(self) -> dict[str, Any]:
        """What a tagger file stores under ``segmenter``: tensors and plain values only."""
        return {
            "chars": self.chars,
            "config": {"embedding": self.model.embed.embedding_dim, "hidden": self.model.gru.hidden_size},
            "state_dict": {k: v.detach().cpu().half() for k, v in self.model.state_dict().items()},
            "multiword": self.multiword.to_dict(),
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> Segmenter:
        model = CharTagger(len(state["chars"]), **state["config"])
        model.load_state_dict({k: v.float() for k, v in state["state_dict"].items()})
        return cls(list(state["chars"]), model, MultiwordSplitter.from_dict(state["multiword"]), state.get("meta"))


class SurfaceToken(Token):
    """A multiword token whose words do not spell it (``du`` = ``de`` + ``le``): its
    :attr:`form` is the text as written."""

    def __init__(self, words: list[Word], surface: str, space_after: bool = True) -> None:
        super().__init__(words, space_after)
        self.surface = surface

    @property
    def form(self) -> str:
        return self.surface


def _space_mask(text: str) -> np.ndarray:
    """Whether each character of ``text`` is whitespace, (n,) bool, without a Python loop per character."""
    mask = np.zeros(len(text), dtype=bool)
    for m in _SPACES.finditer(text):
        mask[m.start()] = True
    return mask
