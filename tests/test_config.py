"""Config schema: defaults fill in, and every kind of mistake names its key in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inn.config import validate_config
from inn.errors import InnError

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def test_empty_config_gets_the_papers_defaults():
    config = validate_config({}, SCHEMA)
    assert config["features"] == {"max_words": 39_000, "max_affixes": 2_000, "word_dim": 320, "affix_dim": 20}
    assert config["walks"]["b"] == [2.0, 1.0, 0.75, 0.5, 0.25]
    assert config["walks"]["sizes"] == {"train": 50_000, "dev": 2_500, "test": 5_000}
    assert config["corpora"]["wsj"]["path"] is None


def test_shipped_config_is_valid_and_equals_the_defaults():
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    assert validate_config(shipped, SCHEMA) == validate_config({}, SCHEMA)


@pytest.mark.parametrize("config, message", [
    ({"walks": {"dim": "ten"}}, r"^config: walks\.dim: 'ten' is not of type 'integer'$"),
    ({"walks": {"dim": 0}}, r"^config: walks\.dim: 0 is less than the minimum of 1$"),
    ({"walks": {"b": [0.5, -1]}}, r"^config: walks\.b\.1: -1 is less than or equal to the minimum of 0$"),
    ({"walks": {"b": []}}, r"^config: walks\.b: \[\] should be non-empty$"),
    ({"walks": {"sizes": {"trian": 5}}}, r"^config: walks\.sizes\.trian: unknown key"),
    ({"learning_rate": 0.5}, r"^config: learning_rate: unknown key \(allowed: "),
    ({"corpora": {"wsj": {"path": ""}}}, r"^config: corpora\.wsj\.path: '' should be non-empty$"),
])
def test_schema_rejections_name_the_key(config, message):
    with pytest.raises(InnError, match=message) as info:
        validate_config(config, SCHEMA)
    assert "\n" not in str(info.value)
