#!/usr/bin/env bash
# The HTML report of the archived Table 1 runs (verdict, Table 1, paired comparisons, every run,
# learning curves and solver statistics), rendered as the workflow renders its own, from the files
# in results/ and the configuration they ran under: config.yaml, config/paper_walks.yaml and the
# overrides of the runs' local.yaml (README.md, "Resuming across machines").
#
#   bash archive/paper_walks/render_report.sh [OUT]      (from the repository's root;
#                                                                OUT: archive/paper_walks/report.html)
set -euo pipefail
here=archive/paper_walks
out=${1:-$here/report.html}
tables=$(mktemp -d)
trap 'rm -rf "$tables"' EXIT
inn collect --results "$here/results" --out-dir "$tables"
# what the error costs: each run's CPU hours from the measured cost per batch (cost/README.md)
inn cost --results "$here/results" --measured "$here/cost/measured.tsv" --out "$tables/cost.tsv"
config=$(python - <<'PY'
import json

import yaml

from inn.experiment.config import validate_config


def merge(base: dict, over: dict) -> dict:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


local = {"device": "cpu", "seeds": [1, 2, 3], "corpora": {"ewt": {"enabled": False}}, "resources": {"threads": 1},
         "models": {"walks": {"b": [0.25, 0.5, 0.75, 1.0, 2.0], "bilstm_hidden_sizes": [100, 300, 500, 1000, 1500]}}}
config = merge(merge(yaml.safe_load(open("config.yaml")), yaml.safe_load(open("config/paper_walks.yaml"))), local)
print(json.dumps(validate_config(config, "workflow/schemas/config.schema.yaml")))
PY
)
inn report --config-json "$config" --schema workflow/schemas/config.schema.yaml --tables "$tables" \
  --histories $(find "$here/results" -name history.tsv | sort) --repo . --out "$out"
