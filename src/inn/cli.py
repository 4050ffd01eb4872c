"""The ``inn`` command: one subcommand per workflow step, each a thin shell over the library.

Every subcommand is a ``main(argv)`` function in the module that owns the step; this file
only names them. Errors the user can act on (:class:`inn.errors.InnError`) are printed as one
``error: ...`` line with exit status 2, never as a traceback.
"""

from __future__ import annotations

import importlib
import logging
import sys

from inn.errors import InnError

#: subcommand -> ("module:function", one-line help). Functions take ``argv: list[str]``.
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare-pos": ("inn.data.prepare:prepare_pos_main", "read a POS corpus, split it, fit the feature vocabularies"),
    "generate-walks": ("inn.data.prepare:generate_walks_main", "generate the biased random walks for one b"),
    "summarize-data": ("inn.data.summary:main", "summarise prepared corpora and walk sets as TSV"),
    "benchmark": ("inn.benchmark:main", "time the implicit layer's solvers against GRU/LSTM"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "usage: inn COMMAND [options]\n\ncommands:\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``inn COMMAND ...``; returns the process exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(_usage(), file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    target, _ = COMMANDS[argv[0]]
    module, function = target.split(":")
    command = getattr(importlib.import_module(module), function)
    try:
        command(argv[1:])
    except InnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
