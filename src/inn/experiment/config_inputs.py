"""The files and folders a workflow config's corpora name, checked before any job runs: that
each exists and holds what its format reads (a split file that is a folder or holds no
sentence, an NLTK data folder without the treebank sample), so that a wrong path is one line
naming its key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from inn.data.corpora import FILE_SPLITS, has_tokens
from inn.errors import InnError
from inn.experiment.config_runs import pos_corpora
from inn.io import check_distinct_splits

#: the keys of each format that name a file or folder the corpus is read from
PATH_KEYS = {
    "conllu": ("train", "dev", "test"),
    "tsv": ("train", "dev", "test"),
    "ptb": ("path",),
    "nltk_treebank": ("nltk_data",),
}


def check_inputs(config: Mapping, downloaded: Iterable[str | os.PathLike] = (), root: str | os.PathLike = ".") -> None:
    """Every file or folder a prepared corpus names exists (relative paths from ``root``, the
    workflow's working directory) and holds what its format reads, except under ``downloaded``:
    the folders the workflow's own download rules fill (UD EWT, NLTK's data).

    Raises:
        InnError: one line naming the key, the path and the fix.
    """
    downloads = [Path(folder) for folder in downloaded]
    for name in pos_corpora(config):
        corpus = config["corpora"][name]
        for key in PATH_KEYS[corpus["format"]]:
            path = corpus.get(key)
            if path is None or any(Path(path) == d or d in Path(path).parents for d in downloads):
                continue
            where = "" if Path(path).is_absolute() else f" (relative to {Path(root).resolve()})"
            key = f"corpora.{name}.{key}"
            if not (Path(root) / path).exists():
                raise InnError(
                    f"config: {key}: {path} does not exist{where}; correct the path, "
                    f"or set corpora.{name}.enabled: false"
                )
            _check_corpus_path(Path(root) / path, corpus["format"], f"config: {key}: {path}{where}")
        if corpus["format"] in FILE_SPLITS:
            try:
                check_distinct_splits(
                    {split: Path(root) / corpus[split] for split in FILE_SPLITS[corpus["format"]]}, f"corpora.{name}."
                )
            except InnError as exc:
                raise InnError(f"config: {exc}") from None


def _check_corpus_path(path: Path, format: str, where: str) -> None:
    """What can be known of an existing corpus path before any job runs: a split file that is
    a folder or holds no sentence, an NLTK data folder without the treebank sample."""
    if format in FILE_SPLITS:
        if path.is_dir():
            raise InnError(f"{where} is a folder, not a {format} file: name the file itself")
        try:
            empty = not has_tokens(path, format)
        except InnError as exc:
            raise InnError(f"{where}: {exc}") from None
        if empty:
            raise InnError(f"{where} holds no sentences: name a file with at least one")
    elif format == "nltk_treebank" and not any(
        (path / "corpora" / name).exists() for name in ("treebank", "treebank.zip")
    ):
        raise InnError(
            f"{where} holds no corpora/treebank (NLTK's treebank sample): run `inn download-treebank "
            "--out-dir DIR` and name DIR, or null to search NLTK_DATA"
        )
