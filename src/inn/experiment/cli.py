"""The ``inn`` command: one subcommand per workflow step, each a thin shell over the library.

Every subcommand is a ``main(argv)`` function in the module that owns the step; this file
only names them. Errors the user can act on (:class:`inn.errors.InnError`) are printed as one
``error: ...`` line with exit status 2, never as a traceback. Before a command runs, the
modules of one's own that register cells and models are imported (:mod:`inn.user_modules`):
those the environment variable ``INN_IMPORTS`` names (the workflow sets it from the config's
``imports``), then those of ``--import MODULE``, an option every command takes. A job stopped
by SIGINT (Ctrl-C) or SIGTERM (a scheduler, Snakemake) unwinds as a KeyboardInterrupt, so that its temporary files
are removed, and ends with one ``interrupted`` line and status 128 + the signal's number.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys

from inn.errors import InnError, shorten

#: subcommand -> ("module:function", one-line help). Functions take ``argv: list[str]``.
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare-pos": (
        "inn.experiment.data.prepare:prepare_pos_main",
        "read a POS corpus, split it, fit the feature vocabularies",
    ),
    "generate-walks": ("inn.experiment.data.prepare:generate_walks_main", "generate the biased random walks for one b"),
    "walk-floor": ("inn.experiment.data.walk_floor:main", "the Bayes-optimal error of walk sets (Table 1's floor)"),
    "walk-floor-survey": (
        "inn.experiment.data.walk_floor:survey_main",
        "the walks' floor over generator settings (direction, d, b)",
    ),
    "download-ewt": ("inn.data.download:main", "download UD English EWT (a pinned release)"),
    "download-treebank": ("inn.data.download:treebank_main", "download NLTK's Penn Treebank sample"),
    "download-dev-corpora": ("inn.data.download:dev_main", "download the corpora the tests read, checksums verified"),
    "train": ("inn.experiment.train.loop:main", "train one model on one prepared task (resumes from its last epoch)"),
    "evaluate": (
        "inn.experiment.train.evaluate:main",
        "score a trained model on a test split: metrics.json, predictions.tsv",
    ),
    "tag": ("inn.tagging.commands:tag_main", "tag running text, CoNLL-U or tokenized text with a trained tagger"),
    "train-segmenter": (
        "inn.experiment.train.segmenter:train_segmenter_main",
        "learn a tokenizer and sentence splitter from a CoNLL-U file with text",
    ),
    "export-tagger": ("inn.tagging.export:export_main", "write a self-contained tagger file from a POS checkpoint"),
    "benchmark-tagger": ("inn.tagging.throughput:benchmark_main", "tokens per second of taggers on one text"),
    "score-text": (
        "inn.tagging.shared_task:score_main",
        "CoNLL 2018 shared task scores of a tagged text against its gold CoNLL-U",
    ),
    "conllu-text": (
        "inn.tagging.shared_task:conllu_text_main",
        "the raw text of a CoNLL-U file, as a UD release's .txt",
    ),
    "train-perceptron": (
        "inn.experiment.train.perceptron:main",
        "train NLTK's averaged perceptron tagger (the classical peer)",
    ),
    "time-model": (
        "inn.experiment.timing.fits:time_model_main",
        "time a trained model's hidden states against sequence length",
    ),
    "fit-timing": (
        "inn.experiment.timing.fits:fit_timing_main",
        "fit t = a n^p to every model's timing, beside the paper's fits",
    ),
    "runs": (
        "inn.experiment.runs:main",
        "list every training run below results folders: finished or not, epochs, device, commit",
    ),
    "collect": ("inn.experiment.report.collect:main", "collect every run's metrics into Tables 1 and 2 (TSV)"),
    "cost": (
        "inn.experiment.report.cost:main",
        "CPU hours of each walks run to its best dev epoch and to the best b-LSTM's dev error",
    ),
    "report": ("inn.experiment.report.html:main", "render the HTML report from the workflow's tables and measurements"),
    "markdown": (
        "inn.experiment.report.views:main",
        "a tables folder's verdict, Tables 1-2, comparisons and runs as Markdown",
    ),
    "concat-tables": ("inn.experiment.report.collect:concat_main", "stack TSV tables with the same columns into one"),
    "benchmark": ("inn.experiment.timing.benchmark:main", "time the implicit layer's solvers against GRU/LSTM"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return (
        "usage: inn COMMAND [--import MODULE] [options]\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n--import MODULE (any command, repeatable): first import a module that registers cells and models"
        " (a name, or path/to/file.py); INN_IMPORTS names more (separated by ':', or a JSON list)"
    )


#: how every command's log lines read (on stderr, and in a run's own training logs)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``inn COMMAND ...``; returns the process exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(_usage(), file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    target, _ = COMMANDS[argv[0]]
    module, function = target.split(":")
    received = [signal.SIGINT]

    def interrupt(signum: int, frame) -> None:
        received.append(signal.Signals(signum))
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        from inn import user_modules

        imports, args = user_modules.split_import_options(argv[1:])
        user_modules.from_environment()
        for name in imports:
            user_modules.import_module(name, "--import")
        getattr(importlib.import_module(module), function)(args)  # importing torch takes a while too
    except InnError as exc:
        print(f"error: {shorten(str(exc), 2000)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # the subcommand may say how to go on
        note = str(exc) or "rerun the same command to start again"
        print(f"interrupted ({received[-1].name}): {note}", file=sys.stderr)
        return 128 + received[-1]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
