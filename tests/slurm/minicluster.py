"""A one-node SLURM cluster on localhost, for tests/test_slurm.py and for trying the profile.

Debian's ``slurm-wlm`` and ``munge`` run one node on 127.0.0.1 in a few seconds: munged
with a key of its own on a private socket, slurmctld and slurmd as root on their own ports,
two partitions (``cpu``, the default, and ``gpu``) on the one node, and one GPU declared as a
generic resource backed by ``/dev/null``, so that jobs asking for ``--gpus=1`` are scheduled.
The daemons run in the foreground as children of the process that starts them; their PIDs
are written under ``STATE`` and ``stop()`` ends exactly those processes, also when a
previous run died without stopping them.

What it takes (Debian 12, SLURM 22.05; from issue 6, the last one checked again here):

- The config must be ``/etc/slurm/slurm.conf``: the plugin's job step drops the ``SLURM_*``
  variables, so ``SLURM_CONF`` does not reach the ``srun`` inside a job.
- A GPU declared with ``Count=`` alone is not detected; ``Name=gpu File=/dev/null`` in
  gres.conf with ``AutoDetect=off`` is.
- Without ``DefMemPerCPU`` each job is given all of the node's memory, so jobs run one at a time.
- There is no accounting (no slurmdbd): ``sacct`` only says "accounting storage is disabled",
  so the plugin must poll job states with ``squeue`` (``--slurm-status-command squeue``), which
  sees finished jobs for ``MinJobAge`` seconds.

Command line (as root)::

    python tests/slurm/minicluster.py start     # installs slurm-wlm and munge with apt if missing
    python tests/slurm/minicluster.py stop
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = Path("/run/inn-slurm-test")
CONF_DIR = Path("/etc/slurm")
MARKER = "# inn test cluster, written by tests/slurm/minicluster.py"
PACKAGES = ["slurm-wlm", "munge"]
PROGRAMS = ["munged", "mungekey", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo"]
DAEMONS = ["munged", "slurmctld", "slurmd"]
CPU_PARTITION, GPU_PARTITION, ACCOUNT = "cpu", "gpu", "inn"
CTLD_PORT, SLURMD_PORT = 26817, 26818
#: Finished jobs stay visible to squeue this long (the plugin's squeue polling needs it).
MIN_JOB_AGE = 600


class ClusterError(RuntimeError):
    """The cluster could not be started; the message holds the daemons' last log lines."""


def unavailable_reason() -> str | None:
    """Why this machine cannot run the test cluster, or None if it can."""
    if not sys.platform.startswith("linux"):
        return "needs Linux (Debian's slurm-wlm and munge)"
    if os.geteuid() != 0:
        return "needs root: installs slurm-wlm and munge with apt and runs slurmctld/slurmd as root"
    if missing_programs() and shutil.which("apt-get") is None:
        return f"SLURM is not installed ({', '.join(missing_programs())} missing) and apt-get is unavailable"
    conf = CONF_DIR / "slurm.conf"
    if conf.exists() and MARKER not in conf.read_text(errors="replace"):
        return f"{conf} belongs to a real SLURM installation; the test cluster would overwrite it"
    return None


def missing_programs() -> list[str]:
    return [name for name in PROGRAMS if shutil.which(name) is None]


def install(timeout: float = 900) -> None:
    """Install slurm-wlm and munge with apt unless their programs are already there."""
    if not missing_programs():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait_for_lock = ["-o", "DPkg::Lock::Timeout=300"]  # another apt-get may be running
    for command in (
        ["apt-get", *wait_for_lock, "update", "-qq"],
        ["apt-get", *wait_for_lock, "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
    ):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise ClusterError(f"{' '.join(command)} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    if missing_programs():
        raise ClusterError(f"apt installed {PACKAGES} but {missing_programs()} are still missing")


def client_env(base: dict | None = None) -> dict:
    """The environment for SLURM commands and Snakemake: no SLURM_* variables from outside."""
    env = {k: v for k, v in (base or os.environ).items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(CONF_DIR / "slurm.conf")
    return env


def slurm_conf(host: str, cpus: int, memory_mb: int) -> str:
    munge_socket = STATE / "munge" / "munge.socket"
    return f"""{MARKER}
ClusterName=inn-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={STATE}/slurmctld
SlurmdSpoolDir={STATE}/slurmd
SlurmctldPidFile={STATE}/slurmctld.slurm.pid
SlurmdPidFile={STATE}/slurmd.slurm.pid
SlurmctldLogFile={STATE}/log/slurmctld.log
SlurmdLogFile={STATE}/log/slurmd.log
# No cgroups (containers): track job processes by parent PID, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd: sacct answers "accounting storage is disabled"; job states come from squeue.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# Without a default, each job is given all of the node's memory and jobs run one at a time.
DefMemPerCPU=500
MinJobAge={MIN_JOB_AGE}
ReturnToService=2
GresTypes=gpu
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} Gres=gpu:1 State=UNKNOWN
PartitionName={CPU_PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName={GPU_PARTITION} Nodes={host} MaxTime=INFINITE State=UP
"""


def gres_conf(host: str) -> str:
    # Count= alone is not detected as a device; a File= is, and /dev/null is always there.
    return f"{MARKER}\nAutoDetect=off\nNodeName={host} Name=gpu File=/dev/null\n"


def _memory_mb() -> int:
    with open("/proc/meminfo") as meminfo:
        total_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    # Declared, not enforced (no cgroups): enough for two data jobs of 4 GB side by side.
    return min(8192, int(total_kb / 1024 * 0.9))


def _alive(pid: int, name: str) -> bool:
    """Whether PID is a running process of program NAME (not a recycled PID)."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return comm == name[:15]


def _end(pid: int, name: str, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL after TIMEOUT seconds, to PID if it still runs program NAME."""
    if not _alive(pid, name):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid, name):
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def _run(command: list[str], timeout: float = 20, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=client_env(), capture_output=True, text=True, timeout=timeout, check=check)


class MiniCluster:
    """Start with ``start()``, stop with ``stop()`` (or use as a context manager)."""

    def __init__(self) -> None:
        self.host = socket.gethostname().split(".")[0]
        self.processes: dict[str, subprocess.Popen] = {}

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, timeout: float = 90) -> MiniCluster:
        reason = unavailable_reason()
        if reason:
            raise ClusterError(reason)
        install()
        self.stop_leftovers()
        shutil.rmtree(STATE, ignore_errors=True)
        for sub in ("munge", "slurmctld", "slurmd", "log"):
            (STATE / sub).mkdir(parents=True)
        (STATE / "munge").chmod(0o711)
        CONF_DIR.mkdir(parents=True, exist_ok=True)
        cpus = min(2, os.cpu_count() or 1)
        (CONF_DIR / "slurm.conf").write_text(slurm_conf(self.host, cpus, _memory_mb()))
        (CONF_DIR / "gres.conf").write_text(gres_conf(self.host))

        deadline = time.monotonic() + timeout
        key, sock = STATE / "munge" / "munge.key", STATE / "munge" / "munge.socket"
        _run(["mungekey", "--create", f"--keyfile={key}", "--force"], check=True)
        key.chmod(0o600)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={STATE}/munge/munged.pid",
                f"--log-file={STATE}/log/munged.log",
                f"--seed-file={STATE}/munge/munged.seed",
            ],
        )
        self._wait(lambda: _run(["munge", "-n", "-S", str(sock)]).returncode == 0, "munged to answer", deadline)
        self._spawn("slurmctld", ["slurmctld", "-D"])
        self._wait(lambda: "UP" in _run(["scontrol", "ping"]).stdout, "slurmctld to answer", deadline)
        self._spawn("slurmd", ["slurmd", "-D", "-N", self.host])
        self._wait(self._node_idle, f"node {self.host} to be idle", deadline)
        return self

    def stop(self, timeout: float = 30) -> None:
        """Cancel the cluster's jobs, end the daemons this object started, remove the config."""
        try:
            self.cancel_all_jobs(timeout)
        finally:
            for name in reversed(DAEMONS):
                process = self.processes.pop(name, None)
                if process is not None and process.poll() is None:
                    process.terminate()
                    try:
                        process.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait(timeout=15)
                (STATE / f"{name}.pid").unlink(missing_ok=True)
            self.stop_leftovers()
            remove_config()

    def __enter__(self) -> MiniCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- helpers --------------------------------------------------------------------------
    @staticmethod
    def stop_leftovers() -> None:
        """End what a previous run started and did not stop, found by PID files: Snakemake
        processes registered with ``register_client`` first, then the daemons."""
        for pidfile in sorted((STATE / "clients").glob("*")):
            pid, cmdline = int(pidfile.name), pidfile.read_bytes()
            try:
                running = Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline
            except OSError:
                running = False
            if running:
                try:
                    os.killpg(pid, signal.SIGKILL)  # a hung status loop ignores SIGTERM
                except ProcessLookupError:
                    pass
            pidfile.unlink()
        for name in reversed(DAEMONS):
            pidfile = STATE / f"{name}.pid"
            try:
                pid = int(pidfile.read_text())
            except (OSError, ValueError):
                continue
            _end(pid, name)
            pidfile.unlink(missing_ok=True)

    def cancel_all_jobs(self, timeout: float = 30) -> None:
        """Cancel every queued or running job and wait until none runs (no orphan job steps)."""
        try:
            if "UP" not in _run(["scontrol", "ping"], timeout=10).stdout:
                return
        except (OSError, subprocess.TimeoutExpired):
            return

        def active() -> list[str]:
            out = _run(["squeue", "-h", "-t", "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING", "-o", "%i"]).stdout
            return out.split()

        jobs = active()
        if jobs:
            _run(["scancel", *jobs])
        deadline = time.monotonic() + timeout
        while active() and time.monotonic() < deadline:
            time.sleep(0.5)

    def _spawn(self, name: str, command: list[str]) -> None:
        log = open(STATE / "log" / f"{name}.out", "w")
        self.processes[name] = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=client_env(),
            start_new_session=True,
        )
        log.close()
        (STATE / f"{name}.pid").write_text(str(self.processes[name].pid))

    def _wait(self, ready, what: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise ClusterError(
                        f"{name} exited with {process.returncode} while waiting for {what}\n{self.logs()}"
                    )
            try:
                if ready():
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.3)
        raise ClusterError(f"timed out waiting for {what}\n{self.logs()}")

    def _node_idle(self) -> bool:
        state = _run(["sinfo", "-h", "-N", "-n", self.host, "-o", "%t"]).stdout.split()
        if any(s.startswith(("drain", "inval", "fail")) for s in state):
            reason = _run(["sinfo", "-R"]).stdout
            raise ClusterError(f"node {self.host} is {state}: {reason}\n{self.logs()}")
        return "idle" in state

    @staticmethod
    def logs(lines: int = 15) -> str:
        """The last lines of each daemon's log, for error messages."""
        parts = []
        for path in sorted((STATE / "log").glob("*")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(parts)


def register_client(pid: int) -> None:
    """Record a process group leader (a Snakemake run) for ``stop_leftovers`` to end if the
    process that started it dies first."""
    (STATE / "clients").mkdir(parents=True, exist_ok=True)
    (STATE / "clients" / str(pid)).write_bytes(Path(f"/proc/{pid}/cmdline").read_bytes())


def unregister_client(pid: int) -> None:
    (STATE / "clients" / str(pid)).unlink(missing_ok=True)


def remove_config() -> None:
    """Remove the slurm.conf and gres.conf this module wrote (never anyone else's)."""
    for name in ("slurm.conf", "gres.conf"):
        path = CONF_DIR / name
        if path.exists() and MARKER in path.read_text(errors="replace"):
            path.unlink()


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (JobState, Partition, Comment, TresPerJob, WorkDir, ...)."""
    out = _run(["scontrol", "show", "job", "-o", job_id], check=True).stdout
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


def main(argv: list[str]) -> int:
    if argv not in (["start"], ["stop"]):
        print(__doc__.rsplit("Command line", 1)[1].strip(), file=sys.stderr)
        return 2
    cluster = MiniCluster()
    if argv == ["start"]:
        try:
            cluster.start()
        except ClusterError as exc:
            print(f"minicluster: {exc}", file=sys.stderr)
            cluster.stop()
            return 1
        # The daemons outlive this process (own sessions); `stop` finds them by PID file.
        print(
            f"SLURM is up: partitions {CPU_PARTITION} (default) and {GPU_PARTITION} on "
            f"{cluster.host}, account {ACCOUNT!r}, logs in {STATE}/log"
        )
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
