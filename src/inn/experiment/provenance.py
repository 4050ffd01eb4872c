"""Where and by what code a run ran: the source commit and the device, as every epoch of a
history, every resume state and every ``metrics.json`` records them. Training and evaluation
import this module; ``inn runs`` (:mod:`inn.experiment.runs`) reads what they recorded.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

#: a history row's columns that say where and by what code an epoch ran
PROVENANCE = ("device", "threads", "commit")
#: what older histories (written before they recorded provenance) show in its place
UNRECORDED = "unrecorded"


@functools.cache
def source_commit() -> str:
    """The git commit of the ``inn`` source that is running: a short hash, with ``-dirty`` when
    the package's tracked files differ from it. A source tree exported by ``git archive`` (the
    source copied to another machine without its repository) has no repository but names its commit in
    ``inn/COMMIT``, which the archive fills in (``export-subst`` in ``.gitattributes``).
    Otherwise (an installed wheel) it is ``inn <version>``. Recorded in every epoch of a
    history, in resume states and in metrics, so that a run's numbers can be traced to the code
    that made them."""
    import inn

    package = Path(inn.__file__).resolve().parent
    git = ["git", "-C", str(package)]
    try:
        # the package must be tracked there: a virtual environment inside some checkout is not the source
        subprocess.run(
            [*git, "ls-files", "--error-unmatch", "__init__.py"], capture_output=True, check=True, timeout=20
        )
        head = subprocess.run(
            [*git, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, check=True, timeout=20
        ).stdout.strip()
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", "."],
            capture_output=True,
            text=True,
            check=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return _archived_commit(package) or f"inn {inn.__version__}"
    return head + ("-dirty" if changed else "")


def _archived_commit(package: Path) -> str | None:
    """The commit ``git archive`` wrote into ``package/COMMIT`` (its ``$Format:%H$`` replaced
    by the full hash), as a short hash; None where the file is missing or was never filled in
    (a wheel built from a checkout)."""
    try:
        text = (package / "COMMIT").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if len(text) < 7 or not all(ch in "0123456789abcdef" for ch in text):
        return None
    return text[:7]


def device_label(device) -> str:
    """The device an epoch ran on, as history records it: ``cpu``, or ``cuda`` with the GPU's name."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return f"cuda {torch.cuda.get_device_name(device)}"
    return device.type


def resumed_commit_note(path: str | os.PathLike, saved: dict[str, Any]) -> str | None:
    """What to say when a resume state was written by other code than the code now running
    (None when the commits agree): the epochs from here on run under the new commit's
    numerics, which may differ from those that trained the state."""
    written = (saved.get("meta") or {}).get("commit")
    now = source_commit()
    if written == now:
        return None
    if written is None:
        return (
            f"{path} was written before resume states recorded their commit; resuming at {now}: if the "
            "solver or model code changed since, the epochs from here on run under other numerics"
        )
    return (
        f"{path} was written at commit {written}; resuming at {now}: the epochs from here on run under "
        f"{now}'s numerics (`git diff {written.removesuffix('-dirty')} {now.removesuffix('-dirty')} -- src/` "
        "shows whether they differ)"
    )
