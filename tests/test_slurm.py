"""The SLURM profile against a real SLURM: a one-node cluster on localhost (tests/slurm).

The workflow's default target runs on a tiny config (``.test/slurm``) through
``profiles/slurm`` exactly as the README says, with three test-only options: job states from
``squeue`` (the test cluster has no accounting database for ``sacct``), a 2-second first status
check instead of 40, and SLURM's logs of successful jobs kept so that the test can read them.

It changes the machine (installs ``slurm-wlm`` and ``munge`` with apt when missing, writes
/etc/slurm, starts SLURM's daemons as root), so it runs only when asked: ``INN_TEST_SLURM=1``
(``.ci/run`` sets it), as root with apt. Otherwise it is skipped with the reason. Every daemon
it starts is stopped by PID, also when a test fails.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "slurm"
_spec = importlib.util.spec_from_file_location("minicluster", REPO / "tests" / "slurm" / "minicluster.py")
minicluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(minicluster)

pytestmark = [pytest.mark.slurm, pytest.mark.workflow]

#: Options the test adds to the README's command (see the module docstring).
TEST_OPTIONS = [
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--slurm-keep-successful-logs",
]
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.")
LOCK = Path("/run/inn-slurm-test.lock")
#: the environment variable that asks for this test (it installs and starts SLURM)
OPT_IN = "INN_TEST_SLURM"


@pytest.fixture(scope="module")
def cluster():
    if os.environ.get(OPT_IN) != "1":
        pytest.skip(f"SLURM integration test: installs and starts SLURM as root; set {OPT_IN}=1 to run it")
    reason = minicluster.unavailable_reason()
    if reason:
        pytest.skip(f"SLURM integration test: {reason}")
    # One test cluster per machine: a second run waits for the first (ports, /etc/slurm).
    with open(LOCK, "w") as lock:
        deadline = time.monotonic() + 900
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.skip(f"SLURM integration test: another run holds {LOCK} for 15 minutes")
                time.sleep(2)
        mini = minicluster.MiniCluster()
        try:
            mini.start()
            yield mini
        finally:
            mini.stop()


def slurm_profile(profile: Path) -> None:
    """Copy profiles/slurm to PROFILE, its placeholders edited for the test cluster as a user would."""
    edits = {
        "config.yaml": {"YOUR_ACCOUNT": minicluster.ACCOUNT},
        "partitions.yaml": {
            "YOUR_CPU_PARTITION": minicluster.CPU_PARTITION,
            "YOUR_GPU_PARTITION": minicluster.GPU_PARTITION,
        },
    }
    profile.mkdir()
    for name, replacements in edits.items():
        text = (PROFILE / name).read_text()
        for placeholder, value in replacements.items():
            assert placeholder in text, f"profiles/slurm/{name} lost its placeholder {placeholder}"
            text = text.replace(placeholder, value)
        (profile / name).write_text(text)


def snakemake(
    workdir: Path, *args: str, snakefile: Path = REPO / "Snakefile", config: dict | None = None, timeout: float = 600
) -> tuple[int, str]:
    """Run Snakemake with the SLURM profile in WORKDIR; returns (exit status, output).

    Bounded: on timeout the whole process group is killed (a hung status loop ignores SIGTERM).
    """
    profile = workdir / "profile"
    if not profile.exists():
        slurm_profile(profile)
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--profile",
        str(profile),
        *TEST_OPTIONS,
        *args,
    ]
    if config is not None:
        (workdir / "config.yaml").write_text(yaml.safe_dump(config))
        command += ["--configfile", str(workdir / "config.yaml")]
    env = minicluster.client_env()
    env["PYTHONPATH"] = str(REPO / "src")
    # Jobs run `python -m inn ...`: the interpreter running the tests must come first on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    minicluster.register_client(process.pid)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate(timeout=30)
        pytest.fail(f"snakemake did not finish within {timeout} s:\n{output[-5000:]}")
    finally:
        if process.poll() is None:  # interrupted (Ctrl-C): leave no Snakemake polling behind
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        minicluster.unregister_client(process.pid)
    return process.returncode, output


def job_stats(output: str) -> Counter:
    """Snakemake's "Job stats" table (rule -> job count) from a (dry) run's output."""
    lines = output.split("Job stats:", 1)[1].splitlines()[3:]
    counts = Counter()
    for line in lines:
        name, count = line.split()
        if name == "total":
            return counts
        counts[name] = int(count)
    raise AssertionError(f"no Job stats table in:\n{output[-3000:]}")


def slurm_jobs(output: str) -> list[dict]:
    """Every job Snakemake submitted, as SLURM's controller reports it, with its log path."""
    jobs = []
    for _, job_id, log in SUBMITTED.findall(output):
        info = minicluster.job_info(job_id)
        info["rule"] = info["Comment"].removeprefix("rule_").split("_wildcards_")[0]
        info["log"] = Path(log)
        jobs.append(info)
    return jobs


def test_default_target_runs_as_slurm_jobs(cluster, tmp_path, tiny_slurm_config):
    tiny_config = tiny_slurm_config
    code, dry = snakemake(tmp_path, "--dry-run", config=tiny_config, timeout=120)
    assert code == 0, dry[-3000:]
    planned = job_stats(dry)

    code, output = snakemake(tmp_path, config=tiny_config)
    assert code == 0, output[-5000:]

    jobs = slurm_jobs(output)
    assert jobs, output[-3000:]
    for job in jobs:
        # SLURM ran it, to completion, in this working directory, on the right partition.
        assert job["JobState"] == "COMPLETED", job
        assert Path(job["WorkDir"]) == tmp_path, job
        asks_gpu = "gpu" in job.get("TresPerJob", "")
        assert job["Partition"] == (minicluster.GPU_PARTITION if asks_gpu else minicluster.CPU_PARTITION), job
        # SLURM's log of the job, named by its job id, holds the rule's execution.
        assert job["log"].name == f"{job['JobId']}.log", job
        assert f"rule {job['rule']}:" in job["log"].read_text(), job["log"]
    # Every job of the default target did its work under SLURM; only `all` (no action) is local.
    local = Counter(re.findall(r"^localrule (\w+):", output, flags=re.M))
    assert set(local) <= {"all"}, local
    assert Counter(job["rule"] for job in jobs) + local == planned

    # The products are there and complete: nothing is left to do.
    code, again = snakemake(tmp_path, "--dry-run", config=tiny_config, timeout=120)
    assert code == 0 and "Nothing to be done" in again, again[-3000:]
    pos = pd.read_csv(tmp_path / "results/tables/data_pos.tsv", sep="\t")
    assert set(pos.corpus) == {"ptb_sample"}
    assert {"train_model", "time_model", "render_report"} <= {job["rule"] for job in jobs}
    assert (tmp_path / "results/report/index.html").stat().st_size > 0


def test_gpu_jobs_get_the_gpu_partition_and_a_gpu(cluster, tmp_path):
    code, output = snakemake(tmp_path, snakefile=REPO / "tests" / "slurm" / "probe.smk", timeout=300)
    assert code == 0, output[-5000:]
    jobs = {job["rule"]: job for job in slurm_jobs(output)}
    assert set(jobs) == {"probe_gpu", "probe_cpu"}, output[-3000:]
    gpu, cpu = jobs["probe_gpu"], jobs["probe_cpu"]
    assert gpu["Partition"] == minicluster.GPU_PARTITION and "gres:gpu:1" in gpu["TresPerJob"], gpu
    assert cpu["Partition"] == minicluster.CPU_PARTITION and "gpu" not in cpu.get("TresPerJob", ""), cpu
    # SLURM hands the job its device; torch would see exactly that one.
    assert (tmp_path / "probe/gpu.txt").read_text().strip() == "CUDA_VISIBLE_DEVICES=0"
    assert (tmp_path / "probe/cpu.txt").read_text().strip() == "CUDA_VISIBLE_DEVICES=unset"


def test_a_failing_job_fails_the_run(cluster, tmp_path, tiny_config):
    broken = tmp_path / "broken-ewt"
    broken.mkdir()
    for split in ("train", "dev", "test"):
        (broken / f"en_ewt-ud-{split}.conllu").write_text("not CoNLL-U\n")
    tiny_config["corpora"]["ewt"].update(
        {split: str(broken / f"en_ewt-ud-{split}.conllu") for split in ("train", "dev", "test")}
    )
    tiny_config["corpora"]["ptb_sample"]["enabled"] = False
    tiny_config["walks"]["b"] = [1.0]

    # The data summary alone: its corpus job fails, and nothing else need run to show it.
    code, output = snakemake(tmp_path, "results/tables/data_pos.tsv", config=tiny_config, timeout=300)
    assert code != 0, output[-5000:]
    failed = [job for job in slurm_jobs(output) if job["rule"] == "prepare_corpus"]
    assert len(failed) == 1, output[-3000:]
    job = failed[0]
    assert job["JobState"] == "FAILED" and job["ExitCode"] != "0:0", job
    # Snakemake names the failed SLURM job and shows the rule's log with the cause.
    assert f"SLURM-job '{job['JobId']}' failed, SLURM status is: 'FAILED'" in output, output[-5000:]
    assert "Error in rule prepare_corpus" in output
    assert "malformed CoNLL-U line" in output
    # SLURM's log of the failed job is kept; the summary depending on it never ran.
    assert job["log"].exists()
    assert not (tmp_path / "results/tables/data_pos.tsv").exists()
