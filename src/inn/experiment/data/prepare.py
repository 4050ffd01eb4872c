"""The data stage's commands: prepare a POS corpus, generate one walk set.

Each reads everything and validates it before writing anything, then writes every output
atomically, so a failed run leaves no partial files behind. A POS folder is written whole or
not at all, by one writer at a time (:func:`inn.io.atomic_folder`): a preparation that fails
half way leaves the folder as it was, and a second one into the same folder is refused.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from inn.data.corpora import READERS, corpus_language, read_corpus
from inn.data.features import FeatureExtractor
from inn.data.fingerprint import write_record
from inn.data.tagged import SPLITS, Sentence, write_tagged
from inn.data.walk import DIRECTIONS, generate_walks, save_walks
from inn.errors import at_least, positive_float, positive_int
from inn.io import atomic_folder, check_out_dir, refuse_inputs_as_outputs
from inn.tables import write_tsv

log = logging.getLogger(__name__)


def summarize_pos(corpus: str, splits: dict[str, list[Sentence]], features: FeatureExtractor) -> pd.DataFrame:
    """Sentences, tokens, tag types, the share of tokens that map to the unknown word, and the
    tokens whose tag never occurs in training (no model can tag them right: a warning says so)."""
    rows = []
    for split, sentences in splits.items():
        words = [w for s in sentences for w, _ in s]
        tags = Counter(t for s in sentences for _, t in s)
        unseen_tags = {tag: count for tag, count in tags.items() if tag not in features.tags.index}
        if unseen_tags:
            log.warning(
                "%s %s: %d token(s) carry %d tag(s) never seen in training (%s); no model predicts "
                "them, so they count as errors",
                corpus,
                split,
                sum(unseen_tags.values()),
                len(unseen_tags),
                ", ".join(f"{tag} x{count}" for tag, count in sorted(unseen_tags.items())),
            )
        rows.append(
            {
                "corpus": corpus,
                "split": split,
                "sentences": len(sentences),
                "tokens": len(words),
                "tag_types": len(tags),
                "oov_rate": sum(w.lower() not in features.words for w in words) / max(len(words), 1),
                "unseen_rate": sum(not features.is_known(w) for w in words) / max(len(words), 1),
                "unseen_tag_tokens": sum(unseen_tags.values()),
            }
        )
    return pd.DataFrame(rows)


def prepare_pos(
    format: str, source: dict, out: str | Path, corpus: str, language: str | None = None, **sizes: int
) -> None:
    """Read a corpus, fit the feature vocabularies on its train split, write everything to ``out``.

    ``format`` and ``source`` are as :func:`inn.data.corpora.read_corpus` takes them. Writes
    ``train.tsv``, ``dev.tsv``, ``test.tsv`` (word<TAB>tag), ``features.json``,
    ``prepared.json`` (the corpus, its format, its language, the CoNLL-U column its tags come
    from, and the data's fingerprint: :mod:`inn.data.fingerprint`) and ``summary.tsv`` under
    ``out``, whole or not at all. ``language``: an ISO 639 code; default: what the format or a
    UD file name says (:func:`inn.data.corpora.corpus_language`), else unknown. Taggers of the corpus tokenize raw
    text by it (:mod:`inn.tagging.tokenize`).
    """
    splits = read_corpus(format, source, corpus)
    features = FeatureExtractor(**sizes).fit(splits["train"])
    summary = summarize_pos(corpus, splits, features)
    column = (source.get("tags") or "xpos") if format == "conllu" else "xpos"  # PTB tags: XPOS
    language = language or corpus_language(format, source)
    with atomic_folder(out) as folder:
        for split in SPLITS:
            write_tagged(folder / f"{split}.tsv", splits[split])
        features.save(folder / "features.json")
        write_record(folder, corpus=corpus, format=format, column=column, language=language)
        write_tsv(folder / "summary.tsv", summary)
    log.info(
        "%s: %s",
        corpus,
        ", ".join(f"{r.split} {r.sentences} sentences / {r.tokens} tokens" for r in summary.itertuples()),
    )


def split_seed(seed: int, b: float, split: str) -> int:
    """An independent, reproducible seed per (base seed, b, split)."""
    entropy = [seed, SPLITS.index(split), round(b * 1_000_000)]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def summarize_walks(b: float, split: str, walks) -> tuple[dict, pd.DataFrame]:
    """One summary row, and the length histogram (length, count) of a walk set."""
    lengths = pd.Series([len(y) for _, y in walks])
    labels = sum(int(y.sum()) for _, y in walks)
    row = {
        "b": b,
        "split": split,
        "sequences": len(walks),
        "steps": int(lengths.sum()),
        "mean_length": float(lengths.mean()),
        "label1_fraction": labels / int(lengths.sum()),
    }
    histogram = lengths.value_counts().sort_index().rename_axis("length").reset_index(name="count")
    histogram.insert(0, "split", split)
    histogram.insert(0, "b", b)
    return row, histogram


def prepare_walks(
    b: float,
    dim: int,
    sizes: dict[str, int],
    seed: int,
    out: str | Path,
    max_len: int = 40,
    direction: str = "gaussian",
) -> None:
    """Generate train/dev/test walks for one bias ``b`` into ``out`` with their summaries.

    Every file records its generator's settings (b, d, direction, max_len, seed), which the
    floor (``inn walk-floor``) and the summaries read back."""
    out = Path(out)
    rows, histograms, sets = [], [], {}
    for split in SPLITS:
        walks = generate_walks(sizes[split], b, dim, split_seed(seed, b, split), max_len=max_len, direction=direction)
        row, histogram = summarize_walks(b, split, walks)
        row.update(direction=direction, dim=dim)
        rows.append(row)
        histograms.append(histogram)
        sets[split] = walks
    for split, walks in sets.items():
        save_walks(out / f"{split}.pt", walks, b=b, dim=dim, seed=seed, direction=direction, max_len=max_len)
    write_record(out, b=b, dim=dim, seed=seed, direction=direction, max_len=max_len)
    write_tsv(out / "summary.tsv", pd.DataFrame(rows))
    write_tsv(out / "lengths.tsv", pd.concat(histograms, ignore_index=True))
    log.info("walks b=%g: %s", b, ", ".join(f"{r['split']} {r['sequences']}" for r in rows))


# --------------------------------------------------------------------------- CLI


def prepare_pos_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="inn prepare-pos", description=prepare_pos.__doc__)
    parser.add_argument("--corpus", required=True, help="the corpus's name in the config (e.g. ewt)")
    parser.add_argument("--format", required=True, choices=sorted(READERS))
    for split in SPLITS:
        parser.add_argument(f"--{split}", help=f"the {split} file (conllu, tsv)")
    parser.add_argument("--tags", choices=["xpos", "upos"], default="xpos", help="the CoNLL-U tag column")
    parser.add_argument("--path", help="the root of the LDC Penn Treebank 3 copy (ptb)")
    parser.add_argument("--nltk-data", help="NLTK data folder (nltk_treebank; default: NLTK's path)")
    parser.add_argument(
        "--language",
        help="the corpus's language, an ISO 639 code such as en (default: what the "
        "format or a UD file name says); its taggers tokenize raw text by it",
    )
    parser.add_argument("--out-dir", dest="out", required=True, help="output folder")
    parser.add_argument("--max-words", type=positive_int, default=39_000)
    parser.add_argument("--max-affixes", type=positive_int, default=2_000)
    parser.add_argument("--word-dim", type=positive_int, default=320)
    parser.add_argument("--affix-dim", type=positive_int, default=20)
    args = parser.parse_args(argv)
    source = {
        "path": args.path,
        "nltk_data": args.nltk_data,
        "tags": args.tags,
        **{split: getattr(args, split) for split in SPLITS},
    }
    needs = {"conllu": SPLITS, "tsv": SPLITS, "ptb": ("path",)}.get(args.format, ())
    missing = [f"--{key}" for key in needs if not source[key]]
    if missing:
        parser.error(f"a {args.format} corpus needs {', '.join(missing)}")
    check_out_dir(args.out)
    written = [
        Path(args.out) / name
        for name in (*(f"{split}.tsv" for split in SPLITS), "features.json", "prepared.json", "summary.tsv")
    ]
    refuse_inputs_as_outputs({"--out-dir": written}, {f"--{split}": source[split] for split in SPLITS})
    prepare_pos(
        args.format,
        source,
        args.out,
        args.corpus,
        language=args.language,
        max_words=args.max_words,
        max_affixes=args.max_affixes,
        word_dim=args.word_dim,
        affix_dim=args.affix_dim,
    )


def generate_walks_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="inn generate-walks", description=prepare_walks.__doc__)
    parser.add_argument("--b", type=positive_float, required=True, help="bias size (finite, above 0)")
    parser.add_argument("--dim", type=positive_int, required=True, help="walk dimension d")
    parser.add_argument(
        "--max-len", type=at_least(2), default=40, help="longest walk (at least 2: with 1 every label would be 1)"
    )
    parser.add_argument("--direction", choices=DIRECTIONS, default="gaussian", help="how v is drawn")
    parser.add_argument("--seed", type=at_least(0), required=True)
    for split, default in zip(SPLITS, (50_000, 2_500, 5_000)):
        parser.add_argument(f"--{split}", type=positive_int, default=default, help=f"{split} sequences")
    parser.add_argument("--out-dir", dest="out", required=True, help="output folder")
    args = parser.parse_args(argv)
    check_out_dir(args.out)
    sizes = {split: getattr(args, split) for split in SPLITS}
    prepare_walks(args.b, args.dim, sizes, args.seed, args.out, max_len=args.max_len, direction=args.direction)
