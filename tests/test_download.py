"""The download commands through their own code path, with a local mirror in place of the
network: the development corpora fetched, checked against the pinned checksums and kept on a
second run; a corrupted copy refused; without a network one line naming what failed and where
a local copy goes instead, no prompt, no traceback, nothing left behind."""

from __future__ import annotations

import hashlib
import shutil
import socket
import zipfile
from pathlib import Path

import conftest
import pytest

from inn.data import download
from inn.data.corpora import EWT_FILES
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


def nltk_index(mirror: Path, archive: Path) -> None:
    """NLTK's data index at ``mirror/index.xml``, its one package the treebank ``archive``."""
    data = archive.read_bytes()
    unzipped = sum(info.file_size for info in zipfile.ZipFile(archive).infolist())
    (mirror / "index.xml").write_text(
        '<?xml version="1.0"?>\n<nltk_data><packages>\n'
        f'<package id="treebank" name="Penn Treebank Sample" subdir="corpora" url="{archive.as_uri()}" '
        f'size="{len(data)}" unzipped_size="{unzipped}" checksum="{hashlib.md5(data).hexdigest()}" '
        f'sha256_checksum="{hashlib.sha256(data).hexdigest()}" unzip="1"/>\n'
        "</packages><collections/></nltk_data>\n"
    )


@pytest.fixture
def mirror(tmp_path, monkeypatch, offline, ewt_dir, nltk_data) -> Path:
    """A local mirror of both download servers (file:// URLs), built from the development corpora;
    the network itself is unreachable, so whatever is fetched comes from here."""
    import nltk

    root = tmp_path / "mirror"
    ewt = root / "ewt" / download.EWT_RELEASE
    ewt.mkdir(parents=True)
    for name in EWT_FILES.values():
        (ewt / name).symlink_to(ewt_dir / name)
    shutil.copy(nltk_data / "corpora" / "treebank.zip", root / "treebank.zip")
    nltk_index(root, root / "treebank.zip")
    monkeypatch.setattr(download, "EWT_URL", f"{root.as_uri()}/ewt/{{release}}/{{name}}")
    monkeypatch.setattr(download, "NLTK_INDEX_URL", (root / "index.xml").as_uri())
    # NLTK opens file:// URLs only below its data path; the mirror is a trusted one
    monkeypatch.setattr(nltk.data, "path", [str(root), *nltk.data.path])
    return root


def files(folder: Path) -> dict[str, int]:
    """Every file below ``folder`` (relative path -> modification time in ns)."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error(capsys) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    return errors[0]


def test_dev_corpora_are_fetched_verified_and_kept(tmp_path, mirror, ewt_dir, nltk_data):
    out = tmp_path / "dev-data"
    assert main(["download-dev-corpora", "--out-dir", str(out)]) == 0
    fetched = files(out)
    # laid out as INN_SHARED_DATA, byte for byte the pinned files, no temporary left behind
    expected = {f"ud-english-ewt/{name}": ewt_dir / name for name in EWT_FILES.values()}
    expected["nltk_data/corpora/treebank.zip"] = nltk_data / "corpora" / "treebank.zip"
    assert set(fetched) == set(expected)
    for path, source in expected.items():
        assert (out / path).read_bytes() == source.read_bytes(), path

    shutil.rmtree(mirror)  # a second run needs no server: it verifies and keeps what is there
    assert main(["download-dev-corpora", "--out-dir", str(out)]) == 0
    assert files(out) == fetched


def test_a_corrupted_copy_in_place_is_refused(tmp_path, mirror, capsys):
    out = tmp_path / "dev-data"
    corrupted = out / "ud-english-ewt" / "en_ewt-ud-train.conllu"
    corrupted.parent.mkdir(parents=True)
    corrupted.write_text("# sent_id = 1\n1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n\n")
    assert main(["download-dev-corpora", "--out-dir", str(out)]) == 2
    error = one_error(capsys)
    assert error.startswith(f"error: {corrupted} does not match its pinned checksum") and "delete it" in error
    assert files(out) == {"ud-english-ewt/en_ewt-ud-train.conllu": corrupted.stat().st_mtime_ns}  # left as it was


def test_a_corrupted_ewt_download_is_refused_and_not_kept(tmp_path, mirror, ewt_dir, capsys):
    served = mirror / "ewt" / download.EWT_RELEASE / "en_ewt-ud-train.conllu"
    served.unlink()
    text = (ewt_dir / served.name).read_text(encoding="utf-8")
    served.write_text(text[: text.index("\n\n", 100_000) + 2], encoding="utf-8")  # whole sentences: parsable
    out = tmp_path / "dev-data"
    assert main(["download-dev-corpora", "--out-dir", str(out)]) == 2
    error = one_error(capsys)
    assert error.startswith(f"error: the download of {served.as_uri()} does not match its pinned checksum")
    assert "nothing was kept" in error and "INN_SHARED_DATA" in error
    assert files(out) == {}


def test_a_corrupted_treebank_download_is_refused_and_not_kept(tmp_path, mirror, capsys):
    archive = mirror / "treebank.zip"
    with zipfile.ZipFile(archive, "a") as z:  # a valid archive NLTK's index vouches for, not the pinned one
        z.writestr("treebank/extra.txt", "not in the sample\n")
    nltk_index(mirror, archive)
    out = tmp_path / "nltk_data"
    assert main(["download-treebank", "--out", str(out)]) == 2
    error = one_error(capsys)
    assert error.startswith("error: NLTK's treebank sample as downloaded does not match its pinned checksum")
    assert "nothing was kept" in error and "corpora.ptb_sample.nltk_data" in error
    assert files(out) == {}


@pytest.mark.parametrize("shared", [None, "elsewhere"])
def test_a_missing_corpus_names_the_fetch_command(tmp_path, monkeypatch, shared):
    """The tests' fixtures fail naming the missing file and the command that fetches it."""
    folder = tmp_path / (shared or ".dev-data")
    monkeypatch.setattr(conftest, "SHARED_DATA", folder)
    monkeypatch.setenv("INN_SHARED_DATA", str(folder) if shared else "")
    with pytest.raises(pytest.fail.Exception) as failed:
        conftest._require(download.DEV_NLTK, "corpora/treebank.zip")
    message = str(failed.value)
    assert message.startswith(f"development corpus missing: {folder}/nltk_data/corpora/treebank.zip")
    assert f"`inn download-dev-corpora --out-dir {folder}`" in message
    assert ("INN_SHARED_DATA=" in message) == bool(shared)


@pytest.mark.parametrize(
    "command, what, where",
    [
        (["download-ewt", "--release", "r2.15"], "could not download UD English EWT r2.15", "corpora.ewt.train"),
        (["download-treebank"], "could not download NLTK's treebank sample", "corpora.ptb_sample.nltk_data"),
        (["download-dev-corpora"], "could not download UD English EWT r2.15", "set INN_SHARED_DATA"),
    ],
)
def test_offline_download_fails_in_one_line(tmp_path, capsys, offline, command, what, where):
    out = tmp_path / "resources"
    assert main([*command, "--out-dir", str(out)]) == 2
    error = one_error(capsys)
    assert error.startswith(f"error: {what}") and where in error and "\n" not in error
    assert not out.exists() or not files(out)  # nothing half-fetched
