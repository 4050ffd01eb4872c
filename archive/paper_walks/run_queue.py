"""Table 1's remaining paper-scale runs, one after another on the CPU cores, at low priority.

One command starts or resumes them from any checkout of this repository that has the pinned
commits in its history:

    python archive/paper_walks/run_queue.py start          # in the background; --slots N (default 2)
    python archive/paper_walks/run_queue.py status         # what runs, what is done, what is next
    python archive/paper_walks/run_queue.py pause|resume   # SIGSTOP / SIGCONT every training (timings, the test suite)
    python archive/paper_walks/run_queue.py stop           # SIGINT: runs stop now, to resume after their last epoch
    python archive/paper_walks/run_queue.py keep           # finished runs to results/, unfinished states to unfinished/

Each run is the workflow's own job (``snakemake ... results/eval/walks/b<b>/<model>/seed<N>/metrics.json``)
in a worktree of the commit it is pinned to (``out/pinned/<commit>``, with its own virtual
environment, made on first use), one CPU thread a job, under ``nice -n 19``. Before a run
starts, the state kept for it in ``unfinished/`` (an INN's ``last.pt`` without warm starts,
0.85 MB) is copied into the worktree where the worktree's own is behind it (a new machine) and
the run's training has not ended there, so ``inn train`` resumes after its last finished epoch;
``start`` first runs ``keep``, so the logs of epochs finished since the last ``keep`` outlive the
restart (the workflow truncates a job's log when it starts it again), and takes over the runs a
previous queue left going (``running.json``), so a restarted queue never starts a run twice.
A run that fails is not started again until the queue is: its log is ``out/queue/<run>.log``.

The runs go in the order of ``RUNS`` in two lanes: an INN (days on one core, its state in git)
and a b-LSTM (hours, its state on this machine) run side by side while both lanes have work, so
the short runs finish rows while the INNs go on, and a b-LSTM's progress is not left on a machine
the next session may not have.
The last run git keeps, once nothing runs beside it, gets every slot's threads (an INN at b =
0.75 trained 1.39-1.45 times as fast on two threads as on one, by wall time; README.md).
A b-LSTM of 1,000 or 1,500 units has a state (32-73 MB) too large for git: it comes after every
run git keeps, whatever its lane, alone on every slot's threads, so it runs on a machine that
has stayed, and a new machine starts it again; ``start --large`` runs only those.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PINNED = ROOT / "out" / "pinned"
STATE = ROOT / "out" / "queue"
LOCAL_YAML = """device: cpu
seeds: [1, 2, 3]
corpora: {ewt: {enabled: false}}
models: {walks: {b: [0.25, 0.5, 0.75, 1.0, 2.0], bilstm_hidden_sizes: [100, 300, 500, 1000, 1500]}}
resources: {threads: THREADS}
"""


@dataclass(frozen=True)
class Run:
    """One Table 1 run and the commit its numbers are pinned to."""

    b: str
    model: str
    seed: int
    commit: str

    @property
    def folder(self) -> str:
        return f"walks/b{self.b}/{self.model}/seed{self.seed}"

    @property
    def units(self) -> int:
        """A b-LSTM's hidden units (0 for the INN)."""
        return int(self.model.split("-h")[1]) if "-h" in self.model else 0

    @property
    def large(self) -> bool:
        """A state too large for git (b-LSTMs of 1,000 units and more): not portable."""
        return self.model in ("bilstm-h1000", "bilstm-h1500")

    @property
    def lane(self) -> str:
        return "inn" if self.model == "inn" else "bilstm"

    def __str__(self) -> str:
        return f"b={self.b} {self.model} seed {self.seed} @{self.commit}"


# b = 1 at a9e4c60 (all its seeds); b = 0.75's INNs and b = 2 at 231d5d2; b = 0.75's b-LSTMs at
# a9e4c60 beside their seed-1 runs (the b-LSTMs' numerics are identical to the bit at both).
A, B = "a9e4c60", "231d5d2"
RUNS = [
    Run("1.0", "inn", 3, A),
    Run("1.0", "bilstm-h1000", 3, A),
    Run("1.0", "bilstm-h1500", 1, A),
    # the 1,500's seed 1 went below the 1,000's seed 1 on dev (0.0485 against 0.0488, epoch 12): the pick
    Run("1.0", "bilstm-h1500", 2, A),
    Run("1.0", "bilstm-h1500", 3, A),
    Run("1.0", "bilstm-h100", 2, A),
    Run("1.0", "bilstm-h100", 3, A),
    Run("0.75", "inn", 1, B),
    Run("0.75", "inn", 2, B),
    Run("0.75", "inn", 3, B),
    Run("0.75", "bilstm-h500", 1, A),
    Run("0.75", "bilstm-h1000", 1, A),
    Run("0.75", "bilstm-h1500", 1, A),
    Run("0.75", "bilstm-h100", 2, A),
    Run("0.75", "bilstm-h100", 3, A),
    # the pick on dev of the sizes finished at b = 0.75 (0.0710 against the 1,000's 0.0723)
    Run("0.75", "bilstm-h500", 2, A),
    Run("0.75", "bilstm-h500", 3, A),
    Run("2.0", "inn", 1, B),
    Run("2.0", "bilstm-h100", 1, B),
    Run("2.0", "bilstm-h300", 1, B),
    Run("2.0", "bilstm-h500", 1, B),
]


def log(message: str) -> None:
    """One line with the time, to the queue's log (standard error when run in the foreground)."""
    sys.stderr.write(time.strftime("%Y-%m-%d %H:%M:%S ") + message + "\n")
    sys.stderr.flush()


def worktree(commit: str) -> Path:
    """The pinned checkout with its virtual environment and run folder, made on first use."""
    tree = PINNED / commit
    if not (tree / ".git").exists():
        PINNED.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True)
    # the pinned commit's guards added since (patches/<commit>-*.patch, README.md says which and
    # why): none changes a number where the commit ran; each replaces a crash
    for patch in sorted((HERE / "patches").glob(f"{commit}-*.patch")):
        applied = subprocess.run(["git", "apply", "--reverse", "--check", str(patch)], cwd=tree, capture_output=True)
        if applied.returncode != 0:
            subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
            log(f"{commit}: applied {patch.name}")
    python = tree / ".venv" / "bin" / "python"
    if not (tree / ".venv" / "bin" / "snakemake").exists():
        log(f"installing {commit}'s environment in {tree / '.venv'}")
        subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, "-e", ".[workflow]"], cwd=tree, check=True)
    return tree


def results(run: Run) -> Path:
    return PINNED / run.commit / "out" / "paper_walks" / "results"


def finished(run: Run) -> bool:
    return any((base / "eval" / run.folder / "metrics.json").exists() for base in (HERE / "results", results(run)))


def position(state: Path) -> tuple[int, int]:
    """Where a resume state stands: its last finished epoch and the batches saved of the next
    ((0, 0) where there is none). Read from the state itself: the workflow removes a resuming
    job's history.tsv until its next epoch ends."""
    import torch

    if not state.is_file():
        return 0, 0
    train_state = torch.load(state, map_location="cpu", weights_only=True, mmap=True)["train_state"]
    return train_state["epoch"], (train_state.get("within") or {}).get("batches", 0)


def bring_kept_state(run: Run) -> None:
    """Copy the state kept in git into the worktree when it is further on than what is there (a
    new machine); otherwise the worktree's own, with its warm starts, resumes. A run whose training
    has ended there (its checkpoint.pt written, its last.pt removed) only awaits its evaluation:
    its history is ahead of any kept state, which must not overwrite it."""
    kept = HERE / "unfinished" / "train" / run.folder
    here = results(run) / "train" / run.folder
    if (here / "checkpoint.pt").exists():
        return
    if position(kept / "last.pt") > position(here / "last.pt"):
        epoch, batches = position(kept / "last.pt")
        log(f"{run}: resuming from the state kept after epoch {epoch}" + (f" and {batches} batches" if batches else ""))
        shutil.copytree(kept, here, dirs_exist_ok=True)


def snakemake(run: Run, target: str, threads: int) -> list[str]:
    tree = PINNED / run.commit
    work = tree / "out" / "paper_walks"
    local = work / f"local_t{threads}.yaml"
    work.mkdir(parents=True, exist_ok=True)
    local.write_text(LOCAL_YAML.replace("THREADS", str(threads)), encoding="utf-8")
    return [
        str(tree / ".venv" / "bin" / "snakemake"),
        "--nolock",
        "--rerun-incomplete",
        "--cores",
        str(threads),
        "--configfile",
        "config/paper_walks.yaml",
        str(local.relative_to(tree)),
        "--directory",
        "out/paper_walks",
        "-s",
        "Snakefile",
        target,
    ]


def environment(run: Run, threads: int) -> dict[str, str]:
    venv = PINNED / run.commit / ".venv" / "bin"
    return {
        **os.environ,
        "PATH": f"{venv}:{os.environ['PATH']}",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }


def run_log(run: Run) -> Path:
    """Where the queue appends a run's Snakemake output."""
    return STATE / f"{run.folder.replace('/', '_')}.log"


def launch(run: Run, threads: int) -> subprocess.Popen:
    """Prepare the run's walks (alone, so two jobs never write them at once), then train and evaluate."""
    tree = worktree(run.commit)
    bring_kept_state(run)
    env = environment(run, threads)
    data = f"results/data/walks/b{run.b}/summary.tsv"
    subprocess.run(
        ["nice", "-n", "19", *snakemake(run, data, 1)],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    STATE.mkdir(parents=True, exist_ok=True)
    out = open(run_log(run), "a", encoding="utf-8")
    log(f"{run}: started on {threads} thread(s)")
    return subprocess.Popen(
        ["nice", "-n", "19", *snakemake(run, f"results/eval/{run.folder}/metrics.json", threads)],
        cwd=tree,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def pending(large: bool) -> list[Run]:
    """The runs not yet finished in order, but those whose states git does not take later: the
    b-LSTMs of 500 units (16.4 MB with the best copy) after the smaller ones, and the large ones
    last (``large``: those alone), so that the runs a new machine can resume finish first."""
    todo = [run for run in RUNS if not finished(run) and (run.large or not large)]
    return sorted(todo, key=lambda r: (r.units >= 500, r.large))


def next_run(todo: list[Run], running: dict, slots: int) -> tuple[Run, int] | None:
    """The run to start next and its threads, or None while the free threads should wait.

    Runs whose states git keeps go first, the first of a lane that has none going, one thread
    each while another runs or waits beside them, else (the last of them) on every slot's
    threads. A large b-LSTM starts only when no other run goes or waits, on every slot's threads:
    it never holds a core a run that outlives the machine could use."""
    portable = [run for run in todo if not run.large]
    if portable:
        busy = {run.lane for run in running}
        run = next((run for run in portable if run.lane not in busy), portable[0])
        return run, 1 if running or len(portable) > 1 else slots
    return (todo[0], slots) if todo and not running else None


class Adopted:
    """A run a previous queue started and left going: watched by its process id."""

    returncode = None

    def __init__(self, pid: int, threads: int) -> None:
        self.pid = pid
        self.threads = threads

    def poll(self) -> int | None:
        return None if alive(self.pid) else -1


def alive(pid: int) -> bool:
    """Whether ``pid`` is still one of this queue's Snakemake jobs (not a reused id)."""
    try:
        return "snakemake" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def adopt() -> dict:
    """The runs a previous queue left going, found by ``running.json``."""
    path = STATE / "running.json"
    entries = json.loads(path.read_text()) if path.exists() else {}
    kept = {name: _pid_threads(entry) for name, entry in entries.items()}
    adopted = {run: Adopted(*kept[str(run)]) for run in RUNS if str(run) in kept and alive(kept[str(run)][0])}
    for run in adopted:
        log(f"{run}: still running (pid {adopted[run].pid}); taken over")
    return adopted


def start(slots: int, large: bool) -> None:
    """Keep ``slots`` threads busy until the list is done, with the runs ``next_run`` picks."""
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / "queue.pid").write_text(str(os.getpid()), encoding="utf-8")
    running: dict[Run, subprocess.Popen | Adopted] = adopt()
    threads = {run: process.threads for run, process in running.items()}
    failed: set[Run] = set()  # not started again by this queue: a failure that repeats costs hours
    stopping = False

    def interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
        nonlocal stopping
        stopping = True
        for process in running.values():
            subprocess.run(["pkill", "-INT", "-s", str(process.pid)], check=False)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    while True:
        for run, process in list(running.items()):
            if process.poll() is not None:
                ended = "ended" if isinstance(process, Adopted) else f"ended with status {process.returncode}"
                if process.returncode and not stopping:
                    failed.add(run)
                    ended += f"; not started again until the queue is, see {run_log(run)}"
                log(f"{run}: {ended}")
                del running[run], threads[run]
        _write_running(running, threads)
        todo = [run for run in pending(large) if run not in running and run not in failed]
        chosen = next_run(todo, running, slots) if sum(threads.values()) < slots else None
        if stopping or (not todo and not running):
            if not running:
                return
        elif chosen is not None:
            run, threads[run] = chosen
            running[run] = launch(run, threads[run])
            _write_running(running, threads)
            continue
        time.sleep(10)


def _write_running(running: dict, threads: dict) -> None:
    entries = {str(run): [process.pid, threads[run]] for run, process in running.items()}
    (STATE / "running.json").write_text(json.dumps(entries), encoding="utf-8")


def _pid_threads(entry: int | list[int]) -> tuple[int, int]:
    """A ``running.json`` entry: [process id, threads], or a process id alone (one thread)."""
    return (entry, 1) if isinstance(entry, int) else (entry[0], entry[1])


def signal_all(sig: signal.Signals) -> None:
    """Send ``sig`` to every running job's process group (snakemake and its inn train)."""
    path = STATE / "running.json"
    for run, entry in (json.loads(path.read_text()) if path.exists() else {}).items():
        pid = _pid_threads(entry)[0]
        # the whole session: snakemake, its shell and inn train (start_new_session made pid its id)
        subprocess.run(["pkill", f"-{sig.name[3:]}", "-s", str(pid)], check=False)
        log(f"{run}: {sig.name}")
    pid_file = STATE / "queue.pid"
    if sig in (signal.SIGINT, signal.SIGTERM) and pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), sig)
        except ProcessLookupError:
            pass


def _first_line(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.readline()


def _keep_last_log(log_file: Path, logs: Path) -> None:
    """Copy the workflow's log of a run's last stretch into ``logs``: over the copy of the same
    stretch (the same first line) kept there before it ended, else as ``train_<when it began>.log``,
    as ``inn runs --keep-states`` names it."""
    first = _first_line(log_file)
    same = [own for own in sorted(logs.glob("*.log")) if _first_line(own) == first]
    began = "".join(ch for ch in first[:19] if ch.isdigit()) or "unknown"
    logs.mkdir(exist_ok=True)
    shutil.copy2(log_file, same[0] if same else logs / f"train_{began}.log")


def keep() -> None:
    """Finished runs' histories, logs, metrics and predictions into results/; unfinished runs'
    states (without warm starts, 16 MB at most) into unfinished/ for the next machine."""
    for commit in sorted({run.commit for run in RUNS}):
        base = PINNED / commit / "out" / "paper_walks" / "results"
        if not base.exists():
            continue
        for run in (r for r in RUNS if r.commit == commit and (base / "eval" / r.folder / "metrics.json").exists()):
            if (HERE / "results" / "eval" / run.folder / "metrics.json").exists():
                continue
            log(f"{run}: archived")
            train = HERE / "results" / "train" / run.folder
            # every stretch's log: the earlier ones kept in unfinished/, overwritten by the run's
            # own (whole) copies of the same stretches, then the workflow's log of the job (the
            # last stretch), replacing the copy of that stretch kept before it ended
            kept = HERE / "unfinished" / "train" / run.folder / "logs"
            if kept.is_dir():
                shutil.copytree(kept, train / "logs", dirs_exist_ok=True)
            shutil.copytree(
                base / "train" / run.folder,
                train,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("*.pt", "*.lock", "*.tmp"),
            )
            log_file = base.parent / "logs" / "train_model" / f"{run.folder}.log"
            if log_file.is_file():
                _keep_last_log(log_file, train / "logs")
            evaluation = HERE / "results" / "eval" / run.folder
            evaluation.mkdir(parents=True, exist_ok=True)
            shutil.copy2(base / "eval" / run.folder / "metrics.json", evaluation / "metrics.json")
            with open(evaluation / "predictions.tsv.gz", "wb") as gz:
                subprocess.run(
                    ["gzip", "-n9c", str(base / "eval" / run.folder / "predictions.tsv")], stdout=gz, check=True
                )
            shutil.rmtree(HERE / "unfinished" / "train" / run.folder, ignore_errors=True)
        # a run in progress (finished runs have no last.pt): its state, though a resuming job's
        # history.tsv is gone until its next epoch ends, and it may hold batches saved inside one
        if any((base / "train").glob("*/*/*/seed*/last.pt")):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "inn",
                    "runs",
                    str(base),
                    "--keep-states",
                    str(HERE / "unfinished"),
                    "--max-state-mb",
                    "16",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )


def status() -> None:
    path = STATE / "running.json"
    running = json.loads(path.read_text()) if path.exists() else {}
    for run in RUNS:
        mark = "done" if finished(run) else "running" if str(run) in running else "large" if run.large else "next"
        print(f"{mark:8} {run}")  # noqa: T201 - the command's output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "status", "pause", "resume", "stop", "keep"])
    parser.add_argument("--slots", type=int, default=2, help="runs at once (CPU cores to use)")
    parser.add_argument("--large", action="store_true", help="the b-LSTMs of 1,000-1,500 units, one at a time")
    parser.add_argument("--foreground", action="store_true", help="start: stay attached")
    args = parser.parse_args()
    if args.command == "start" and not args.foreground:
        STATE.mkdir(parents=True, exist_ok=True)
        with open(STATE / "queue.log", "a", encoding="utf-8") as out:
            subprocess.Popen(
                [sys.executable, __file__, "start", "--foreground", "--slots", str(args.slots)]
                + (["--large"] if args.large else []),
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        log(f"queue started; its log: {STATE / 'queue.log'}")
    elif args.command == "start":
        keep()  # a restart truncates each job's workflow log: keep what the last stretch wrote first
        start(args.slots, args.large)
    elif args.command in ("pause", "resume", "stop"):
        signal_all({"pause": signal.SIGSTOP, "resume": signal.SIGCONT, "stop": signal.SIGINT}[args.command])
    elif args.command == "keep":
        keep()
    else:
        status()


if __name__ == "__main__":
    main()
