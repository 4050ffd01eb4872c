"""The ``inn`` command's shared flags mean the same in every subcommand."""

from __future__ import annotations

import re

import pytest

from inn.experiment.cli import COMMANDS, main


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    return re.sub(r"\s+", " ", out.split("options:", 1)[-1])  # the options, without the usage line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_shared_flags_mean_the_same_everywhere(command, capsys):
    text = _help(command, capsys)
    # --out is a file, --out-dir a folder; sequences per batch are --batch-size
    for match in re.finditer(r"--out (\S+)\s+(.*?)(?= -|$)", text):
        assert "folder" not in match.group(2).split("(")[0], f"{command}: --out must name a file: {match.group(0)}"
    for match in re.finditer(r"--out-dir (\S+)\s+(.*?)(?= -|$)", text):
        assert "folder" in match.group(2) or "NLTK data" in match.group(2), f"{command}: {match.group(0)}"
    assert not re.search(r"--batch(?![-\w])", text), f"{command}: use --batch-size"
    assert not re.search(r"--(num-)?threads? THREADS .*0: leave", text)


def test_seed_defaults_agree(capsys):
    """Where a command takes --seed with a default, it is the config's default seed, 1."""
    import inn.experiment.benchmark as benchmark

    assert benchmark.build_parser().parse_args([]).seed == 1
    assert benchmark.build_parser().parse_args([]).batch == 20
