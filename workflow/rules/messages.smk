# One line where Snakemake's own messages name too little, included before `configfile:`.
import sys
from pathlib import Path

# this checkout's library, as common.smk puts it on the path
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from inn.errors import InnError
from inn.experiment.config import read_yaml

#: the project's config, the base of every run (Snakefile's `configfile:`), beside the Snakefile
PROJECT_CONFIG = str(Path(workflow.basedir) / "config.yaml")

# A config.yaml that is not YAML: file, line and column (Snakemake's message names neither). A
# --configfile is parsed by Snakemake's command line before any of the workflow runs, so it
# cannot be checked here.
if Path(PROJECT_CONFIG).is_file():
    try:
        read_yaml(PROJECT_CONFIG)
    except InnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)

#: what Snakemake logs when a SIGTERM stops it: it lets the running jobs finish, then ends with
#: "At least one job did not complete successfully" although none failed
STOPPED = "Will exit after finishing currently running jobs"


onerror:
    paths = [log] if isinstance(log, str) else log or []  # Snakemake 9: a list of log files
    logs = [Path(path).read_text(encoding="utf-8", errors="replace") for path in paths if Path(path).is_file()]
    if any(STOPPED in text for text in logs) and not any("Error in rule " in text for text in logs):
        print(
            "error: Snakemake was stopped by a signal (SIGTERM) and let its running jobs finish; no job "
            "failed, whatever the next lines say: rerun the same command to run the jobs still to do",
            file=sys.stderr,
        )
