"""The download commands without a network: one line naming what failed and the config key of a
local copy, no prompt, no traceback, nothing left behind."""

from __future__ import annotations

import socket

import pytest

from inn.experiment.cli import main


@pytest.fixture
def offline(monkeypatch):
    """No name resolves and no connection opens, as on a compute node behind a firewall."""

    def unreachable(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unreachable)
    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(socket.socket, "connect", unreachable)
    # a prompt would read stdin: make any read fail loudly instead of hanging
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("the download prompted"))


@pytest.mark.parametrize("command, what, key", [
    (["download-ewt", "--release", "r2.15"], "could not download UD English EWT r2.15", "corpora.ewt.train"),
    (["download-treebank"], "could not download NLTK's treebank sample", "corpora.ptb_sample.nltk_data"),
])
def test_offline_download_fails_in_one_line(tmp_path, capsys, offline, command, what, key):
    out = tmp_path / "resources"
    assert main([*command, "--out", str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"error: {what}") and key in errors[0] and "\n" not in errors[0]
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]  # nothing half-fetched
