"""Atomic file output: a reader never sees a half-written file, a crash leaves none behind.

Also what keeps an output folder sound between runs: :func:`locked_folder` admits one writer
at a time and checks the folder is writable before any work starts,
:func:`remove_stale_temps` clears the temporary files of a writer that was killed (``kill -9``)
before it could remove them itself, and :func:`atomic_folder` writes a folder whole or not at
all.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os
import pickle
import re
import shutil
import socket
import stat
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import torch

from inn.errors import InnError

#: the lock file :func:`locked_folder` holds in a folder
LOCK_NAME = ".lock"
#: how torch's weights-only reader names a global (a function or class) it refuses to load
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
#: what to do about a failed write, by its errno
_WRITE_FIXES = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space (disk quota)",
    errno.EFBIG: "free some space or raise the file size limit",
    errno.EACCES: "make the folder writable or choose another",
    errno.EPERM: "make the folder writable or choose another",
    errno.EROFS: "choose a folder on a writable file system",
}


def _write_error(target: str | os.PathLike, exc: OSError) -> InnError:
    """The one line for a failed write of ``target`` (a file or folder): cause and fix."""
    fix = _WRITE_FIXES.get(exc.errno, "check the folder")
    return InnError(f"cannot write {target}: {exc.strerror or exc}; {fix}, then rerun")


def _temp_affixes(name: str) -> tuple[str, str]:
    """Prefix and suffix of the temporary files of an atomic write of ``name``."""
    return f".{name}.", ".tmp"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    The temporary file lives in the same directory, so the final ``os.replace`` is atomic. A
    ``path`` that exists and is not a regular file (a device such as ``/dev/null``, a pipe) is
    refused: replacing it would destroy it.
    On any exception the temporary file is removed and ``path`` is left untouched; a failed
    write (no space, no permission) becomes an :class:`InnError` naming the file and the cause.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # a device or pipe (/dev/null) must never be replaced by a file
        raise InnError(f"cannot write {path} atomically: it is not a regular file; give a file path")
    prefix, suffix = _temp_affixes(path.name)
    tmp_path = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
        tmp_path = Path(tmp)
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; outputs get ordinary permissions
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as exc:
        kept = f" (the earlier {path.name} is unchanged)" if path.exists() else ""
        raise InnError(f"{_write_error(path, exc)}{kept}") from None
    finally:
        if tmp_path is not None:
            tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open ``path`` for writing through :func:`atomic_path`."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_open(path, encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=False)
        handle.write("\n")


def torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` atomically (checkpoints, tensors).

    Through a Python file, so that a full disk surfaces as the file's ``OSError(ENOSPC)``:
    torch reports a failed write as an ``unexpected pos`` RuntimeError that names no cause
    (given a path, always; given a file, when closing the archive after the write failed).
    """
    with atomic_open(path, "wb") as handle:
        try:
            torch.save(obj, handle)
        except RuntimeError as exc:
            cause = exc.__context__
            while cause is not None and not isinstance(cause, OSError):
                cause = cause.__context__
            if cause is None:
                raise
            raise cause from None


def code_in_file(exc: BaseException) -> str | None:
    """The Python function or class a file would have to run to load, where torch's weights-only
    reader refused it for that (``exc``, from ``torch.load(weights_only=True)``); None where it
    failed for another reason (empty, truncated, not a torch file)."""
    if isinstance(exc, pickle.UnpicklingError):
        found = _GLOBAL.search(str(exc))
        if found:
            return found.group(1)
    return None


def refused_as_code(path: str | os.PathLike, name: str, fix: str) -> InnError:
    """The one line for a file refused because loading it would run Python code (``name``):
    inn reads models, states, metrics and data only as data, never as code."""
    return InnError(
        f"{path} is refused: loading it would run Python code ({name}), and inn reads model, state "
        f"and data files only as data; {fix}"
    )


def torch_load_data(path: str | os.PathLike, fix: str, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain Python values only, so that no
    file, whoever made it, runs code when read.

    Raises:
        InnError: the file would run code to load (``fix`` says what to do instead; it is never
            loaded another way).
        Exception: any other failure of ``torch.load`` (empty, truncated, not a torch file),
            for the caller to word with :func:`torch_load_problem`.
    """
    try:
        with warnings.catch_warnings():  # torch's notes on pickle protocols it parses: not the user's concern
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        name = code_in_file(exc)
        if name is not None:
            raise refused_as_code(path, name, fix) from None
        raise


def torch_load_problem(path: str | os.PathLike, exc: BaseException) -> str:
    """Why ``torch.load`` failed on ``path``, in words for a message: the file is empty, is no
    torch file at all (a text file: torch's own words would be "pop from empty list"; random
    bytes: "Unsupported operand"), would run code to load, or is a torch file that is truncated
    or damaged (torch's first sentence)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(2)
    except OSError as error:
        return error.strerror or str(error)
    if not head:
        return "the file is empty"
    name = code_in_file(exc)
    if name is not None:
        return f"loading it would run Python code ({name}), and inn reads it only as data"
    if (head != b"PK" and head[:1] != b"\x80") or isinstance(exc, pickle.UnpicklingError):
        # not a zip archive (torch.save) or a pickle (the legacy format); or bytes the
        # weights-only reader cannot parse at all: no file torch writes
        return "not a torch file"
    words = str(exc).strip().split(". ")[0].splitlines() or [type(exc).__name__]
    return f"truncated or damaged: {words[0]}"


def remove_stale_temps(folder: str | os.PathLike, names: Iterable[str]) -> list[Path]:
    """Remove the temporary files that atomic writes of ``folder/<name>`` left behind when
    their process was killed before it could clean up; returns them.

    Call it only while holding the folder (:func:`locked_folder`): a live writer's temporary
    file looks the same.
    """
    removed = []
    for name in names:
        prefix, suffix = _temp_affixes(name)
        for tmp in Path(folder).glob(f"{glob.escape(prefix)}*{suffix}"):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def refuse_folders_at(folder: str | os.PathLike, names: Iterable[str]) -> None:
    """Raise an InnError if ``folder/<name>`` is a folder for one of the files a run writes or
    reads there: a file can never be saved onto it, and the first save (after a whole epoch of
    training) is too late to find out."""
    for name in names:
        path = Path(folder) / name
        if path.is_dir():
            raise InnError(f"{path} is a folder where the run keeps its file {name}: move it aside, then rerun")


@contextlib.contextmanager
def locked_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold ``folder`` (created if missing) as its only writer for the block.

    An exclusive ``flock`` on ``folder/.lock``, which records the holder's process and host;
    the operating system drops it when the process ends, however it ends, so a crashed run
    never blocks the next one. Before yielding, the folder is checked writable.

    Raises:
        InnError: another process holds the folder (naming it), or the folder cannot be
            created or written (naming the cause).
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise _write_error(folder, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            raise InnError(
                f"{folder} is in use by another run ({holder}); wait for it to finish or stop it, "
                "or choose another output folder"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
            probe, probe_path = tempfile.mkstemp(prefix=".write-test.", dir=folder)
            os.close(probe)
            os.unlink(probe_path)
        except OSError as exc:
            raise _write_error(folder, exc) from None
        yield folder
    finally:
        os.close(fd)


def _same_file(a: Path, b: Path) -> bool:
    """Are ``a`` and ``b`` one file (a link, ``./x``, another spelling of the path)?"""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): compare where the paths lead
        return a.resolve() == b.resolve()


def _paths(value: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [Path(value)] if str(value) not in ("", "-") else []  # "-": standard input/output
    return [path for item in value for path in _paths(item)]


def refuse_inputs_as_outputs(outputs: dict[str, Any], inputs: dict[str, Any]) -> None:
    """Raise an InnError, before any work, where an output a command would write is one of the
    files it reads: ``inn tag IN.conllu --out IN.conllu`` would replace the gold file with the
    tagged copy, ``--out TAGGER.pt`` the tagger itself.

    Args:
        outputs: what names each output (``"--out"``, ``"--out-dir"``) -> its path, or the list
            of files a command writes in a folder.
        inputs: what names each input (``"the model"``, ``"--gold"``) -> its path or paths.
    """
    for flag, value in outputs.items():
        for output in _paths(value):
            for what, paths in inputs.items():
                if any(_same_file(output, path) for path in _paths(paths)):
                    said = (
                        f"{flag} {output} is"
                        if isinstance(value, (str, os.PathLike))
                        else f"{flag} would write {output}, which is"
                    )
                    raise InnError(
                        f"{said} {what}, an input of this command: inn never writes over its "
                        "inputs; give another output path"
                    )


def write_output(path: str | os.PathLike | None, text: str) -> None:
    """Write ``text`` to ``path``, or to standard output when ``path`` is None.

    A regular file is written atomically (:func:`atomic_open`); a device or pipe (``/dev/null``,
    ``/dev/stdout``) as it is. A failed write, also of standard output (a full disk behind
    ``> file``), is one line naming the target and the cause.
    """
    target = "standard output" if path is None else str(path)
    try:
        if path is None:
            sys.stdout.write(text)
            sys.stdout.flush()
        elif Path(path).exists() and not Path(path).is_file():
            with open(path, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
        else:
            with atomic_open(path, encoding="utf-8", newline="\n") as handle:
                handle.write(text)
    except OSError as exc:
        if path is None:  # what is left in the buffer would fail again at exit, with a traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise _write_error(target, exc) from None


def read_stdin() -> bytes:
    """All of standard input, as bytes; a closed one (``<&-``) is one line saying so."""
    if sys.stdin is None:
        raise InnError("standard input is closed: give the input as a file, or pipe it in (... | inn ...)")
    try:
        return sys.stdin.buffer.read()
    except OSError as exc:
        raise InnError(f"cannot read standard input: {exc.strerror or exc}") from None


def file_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is: ``"file"``, ``"folder"``, ``"a named pipe (FIFO)"``, ``"a device"``,
    ``"a socket"``; None where nothing is there (or a link leads nowhere)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket"


def prepared_files(folder: str | os.PathLike | None) -> list[Path]:
    """The files of a prepared data folder a command may read (its splits, ``features.json``,
    ``prepared.json``), that an output must never replace; none for None."""
    if folder is None:
        return []
    names = [f"{split}.{ext}" for split in ("train", "dev", "test") for ext in ("tsv", "pt")]
    return [Path(folder) / name for name in (*names, "features.json", "prepared.json")]


def check_regular_file(path: str | os.PathLike, what: str) -> None:
    """Raise an InnError unless ``path`` is a regular file: a folder, a named pipe or a device
    is named as what it is (a pipe or device would be read once, or never end), not as missing."""
    kind = file_kind(path)
    if kind == "folder":
        raise InnError(f"{path} is a folder, not a {what}: name the file itself")
    if kind is None:
        raise InnError(f"{what} not found: {path}")
    if kind != "file":
        raise InnError(
            f"{path} is {kind}, not a regular file: a {what} is read more than once, so copy it "
            "into a file and name that"
        )


def check_distinct_splits(files: dict[str, str | os.PathLike], where: str = "") -> None:
    """Raise an InnError where two splits name one file (``--train x --dev x --test x``): the
    test score would be measured on training data, or the model chosen on its test set, and the
    numbers look like any others. ``where`` goes before the split names (``corpora.mine.``)."""
    seen: dict[tuple[int, int], str] = {}
    for split, path in files.items():
        try:
            info = os.stat(path)
        except OSError:
            continue  # a missing file is reported by the reader, by name
        first = seen.setdefault((info.st_dev, info.st_ino), split)
        if first != split:
            raise InnError(
                f"{where}{first} and {where}{split} are the same file ({path}): a score on it would "
                f"not measure a held-out split; give each split its own file"
            )


def check_out_dir(folder: str | os.PathLike, flag: str = "--out-dir") -> None:
    """Raise an InnError, before any work, where the output folder ``folder`` names something
    that is not a folder (a file, a pipe): found only at the first write, it would come after
    the whole corpus was read."""
    kind = file_kind(folder)
    if kind not in (None, "folder"):
        shown = "a file" if kind == "file" else kind
        raise InnError(f"{flag} {folder} is {shown}, not a folder: name a folder (it is created if missing)")


@contextlib.contextmanager
def atomic_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Write ``folder`` whole or not at all, as its only writer: yield an empty temporary
    sibling to write into; on success it takes ``folder``'s place, on any exception it is
    removed and ``folder`` is left as it was.

    Held as :func:`locked_folder` holds it (a second writer is refused, naming the first); the
    held lock file moves into the new folder, so it stays held across the swap. What the old
    folder holds that the new one does not (a log, notes of one's own) is carried over. The
    temporary siblings of a writer that was killed are removed first.
    """
    folder = Path(folder)
    prefix = f".{Path(os.path.abspath(folder)).name}.writing-"
    with locked_folder(folder):
        for stale in folder.parent.glob(f"{glob.escape(prefix)}*"):
            shutil.rmtree(stale, ignore_errors=True)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=folder.parent))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; an output folder gets ordinary permissions
        except OSError as exc:
            raise _write_error(folder.parent, exc) from None
        try:
            yield tmp
            old = Path(f"{tmp}.old")
            try:
                for entry in folder.iterdir():
                    if entry.name != LOCK_NAME and not os.path.lexists(tmp / entry.name):
                        os.replace(entry, tmp / entry.name)
                os.replace(folder / LOCK_NAME, tmp / LOCK_NAME)
                os.replace(folder, old)
                os.replace(tmp, folder)
            except OSError as exc:
                raise _write_error(folder, exc) from None
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
