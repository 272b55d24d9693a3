"""Flags and the per-model mapping file: what engine outputs do not say."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.adapters.defaults import Defaults, MappingError, load_mapping
from tests.monitor.adapters import MAPPING


def test_fixture_mapping_reads_dates_as_the_revisions_they_mean() -> None:
    models = load_mapping(MAPPING)
    assert set(models) == {"llama-3.1-70b-instruct", "qwen2.5-32b-instruct",
                           "llama-3.1-8b-instruct", "llama-3.3-70b-instruct"}
    assert models["llama-3.1-70b-instruct"]["draft_revision"] == "2026-09-30"
    assert models["qwen2.5-32b-instruct"]["num_speculative_tokens"] == 3


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mapping.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "reason"), [
    ("m:\n  rout: chat\n", "mapping error at m.rout: unknown key (known: route, "),
    ("m:\n  num_speculative_tokens: 0\n",
     "mapping error at m.num_speculative_tokens: must be an integer >= 1 (got 0)"),
    ("m:\n  num_speculative_tokens: '5'\n",
     "mapping error at m.num_speculative_tokens: must be an integer >= 1 (got '5')"),
    ("m:\n  target_revision: 3\n", "mapping error at m.target_revision: must be a non-empty "
     "string (got 3)"),
    ("m: chat\n", "mapping error at m: want a mapping of settings, got str"),
    ("- m\n", "want model name -> settings, got list"),
    ("m: [\n", "invalid YAML"),
])  # fmt: skip
def test_bad_mapping_names_the_key(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(MappingError) as err:
        load_mapping(_write(tmp_path, text))
    assert reason in str(err.value)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(MappingError, match="No such file"):
        load_mapping(tmp_path / "nope.yaml")
    assert load_mapping(_write(tmp_path, "# nothing yet\n")) == {}


def test_entry_beats_flags_and_engine_name_beats_target_model_flag(tmp_path: Path) -> None:
    models = load_mapping(_write(tmp_path, (
        "served-a:\n  route: code\n  draft_model: null\n"
        "served-b:\n  target_model: renamed-b\n")))
    d = Defaults(route="chat", target_model="flag-model", draft_model="global-draft",
                 models=models)
    a = d.for_model("served-a")
    assert (a.route, a.target_model, a.draft_model) == ("code", "served-a", None)
    assert not Defaults(models=models).for_model("served-a").speculation_configured
    assert d.for_model("served-b").target_model == "renamed-b"
    # an output that names no model: the flag is both its name and its mapping key
    none = d.for_model(None)
    assert (none.route, none.target_model, none.draft_model) == (
        "chat", "flag-model", "global-draft")
    assert d.for_model("unmapped").target_model == "unmapped"
