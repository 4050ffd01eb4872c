"""A tokenizer, sentence splitter and multiword-token splitter learned from a CoNLL-U treebank
with its text (:class:`Segmenter`), stored in a tagger file beside the tagger so that the file
reads running text in the treebank's language."""

from inn.tagging.segmenter.model import CharTagger, Segmenter
from inn.tagging.segmenter.multiword import MultiwordSplitter
from inn.tagging.segmenter.train import SegmenterData, TrainSettings, segmenter_data, train_segmenter

__all__ = [
    "CharTagger",
    "MultiwordSplitter",
    "Segmenter",
    "SegmenterData",
    "TrainSettings",
    "segmenter_data",
    "train_segmenter",
]
