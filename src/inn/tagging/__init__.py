"""The tagger, a product of the library: tag running text, CoNLL-U or tokenized text with a
trained tagger file, and score what it tagged.

- :mod:`~inn.tagging.tagger`: :class:`~inn.tagging.tagger.Tagger`, a self-contained tagger file
  loaded and applied (what ``inn tag`` runs);
- :mod:`~inn.tagging.tokenize`: running text split into words by a language's rules in a
  corpus's conventions (:mod:`~inn.tagging.sentences`: its sentence splitter;
  :mod:`~inn.tagging.english`: English's word lists and patterns);
  :mod:`~inn.tagging.segmenter`: a tokenizer, sentence splitter and multiword splitter learned
  from a treebank's text;
- :mod:`~inn.tagging.documents`: the text formats read and written, kept line for line;
- :mod:`~inn.tagging.perceptron`: NLTK's averaged perceptron, the classical peer;
- :mod:`~inn.tagging.scoring`: scores of predicted against gold sequences, the same for every
  model; :mod:`~inn.tagging.conll18`: the CoNLL 2018 shared task's scorer;
- the commands: :mod:`~inn.tagging.commands` (``inn tag``), :mod:`~inn.tagging.export`
  (``export-tagger``), :mod:`~inn.tagging.throughput` (``benchmark-tagger``),
  :mod:`~inn.tagging.shared_task` (``score-text``, ``conllu-text``), reading their inputs
  through :mod:`~inn.tagging.files`.
"""

from inn.tagging.conll18 import score_texts
from inn.tagging.documents import TextSentence, read_text, write_text
from inn.tagging.perceptron import PerceptronPeer, train_perceptron
from inn.tagging.scoring import score_pos, score_walks
from inn.tagging.tagger import Tagger
from inn.tagging.tokenize import Tokenizer, tokenizer_for

__all__ = [
    "PerceptronPeer",
    "Tagger",
    "TextSentence",
    "Tokenizer",
    "read_text",
    "score_pos",
    "score_texts",
    "score_walks",
    "tokenizer_for",
    "train_perceptron",
    "write_text",
]
