"""The model registry is the one list of models: the schema, the rules, the tables and the
report read it, so adding a model to the experiments is one entry."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml

from inn.experiment.config import load_schema
from inn.models import MODELS, ModelConfig, ModelSpec, build_model, register
from test_workflow import REPO, SNAKEMAKE


def test_the_schemas_model_lists_are_the_registrys():
    """The schema file's lists document the models (validation takes them from the registry)."""
    models = load_schema(REPO / "workflow/schemas/config.schema.yaml")["properties"]["models"]["properties"]
    for task in ("pos", "walks"):
        assert models[task]["properties"]["run"]["items"]["enum"] == [
            name for name, spec in MODELS.items() if task in spec.tasks]


#: a model the experiments do not have: a unidirectional GRU of the POS baselines' size, under its own name
REGISTER = """
from inn.models import ModelSpec, register
register(ModelSpec("gru_wide", "GRU (wide)", "gru", sizes={"pos": ("baseline_hidden_size",)}))
"""


def test_a_model_registered_alone_runs_through_the_workflow(tmp_path, tiny_config):
    """One registry entry, nothing else: the config accepts the model, the rules plan its training,
    evaluation and timing, and the tables and report wait for it."""
    tiny_config["models"]["pos"]["run"] = ["inn", "gru_wide"]
    tiny_config["models"]["walks"]["run"] = []
    tiny_config["corpora"]["ewt"]["enabled"] = False
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config))
    command = SNAKEMAKE[3:] + ["-n", "--cores", "1", "--directory", str(tmp_path),
                               "--configfile", str(tmp_path / "config.yaml")]
    script = REGISTER + f"import sys\nfrom snakemake.cli import main\nsys.argv = ['snakemake', *{command!r}]\nmain()\n"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "results/train/pos/ptb_sample/gru_wide/seed1/checkpoint.pt" in out
    assert "results/eval/pos/ptb_sample/gru_wide/seed1/metrics.json" in out
    assert "results/timing/pos/ptb_sample/gru_wide/seed1.tsv" in out
    # Without the entry the same config is refused by the schema, naming the key.
    plain = subprocess.run([sys.executable, "-c", script.replace(REGISTER, "")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert plain.returncode != 0 and "models.pos.run.1: 'gru_wide' is not one of" in plain.stdout + plain.stderr


def test_a_registered_model_builds_and_tags():
    spec = register(ModelSpec("bigru_test", "BiGRU (test)", "gru", bidirectional=True, sizes={"pos": ()}))
    try:
        cfg = ModelConfig(task="pos", kind=spec.name, hidden_size=5, num_classes=3, word_vocab=10,
                          affix_vocab=(4,) * 6, word_dim=4, affix_dim=2)
        model = build_model(cfg)
        assert model.rnn.output_size == 10 and not cfg.implicit
    finally:
        del MODELS[spec.name]
