"""Run configuration: presets, extends, dotted overrides, readable errors, diffs and provenance."""

from __future__ import annotations

import pytest
import yaml

from core.config import (RunConfig, config_diff, config_from_dict, flatten, list_presets, load_config, overrides_of,
                         parse_override, valid_keys, with_overrides)
from core.errors import KrlError


def test_presets_are_listed_and_all_load():
    names = list_presets()
    assert {"kevin", "single-turn", "demo"} <= set(names)
    for name in names:
        cfg = load_config(name)
        assert cfg.preset == name and cfg.overrides == []


def test_kevin_preset_is_multi_turn_cuda_with_optional_rag():
    cfg = load_config("kevin")
    assert cfg.max_turns == 4 and cfg.backend == "tinker" and cfg.kernel.backend == "cuda"
    assert cfg.model.startswith("Qwen/") and cfg.rag.index is None and cfg.rag.k > 0


def test_single_turn_extends_kevin():
    single, kevin = load_config("single-turn"), load_config("kevin")
    assert single.max_turns == 1
    diff = config_diff(kevin, single, ignore=("preset",))
    assert set(diff) == {"max_turns", "early_stop.mode"}


def test_demo_preset_replays_packaged_recordings_on_builtin_torch():
    cfg = load_config("demo")
    assert cfg.backend == "replay" and cfg.kernel.backend == "torch" and cfg.problems == "builtin"
    assert cfg.eval.devices == "auto" and 3 <= cfg.max_turns <= 4
    path = cfg.replay_path()
    assert path is not None and path.is_absolute()
    assert path.parent.name == "demo" and path.parent.parent.name == "data" and path.name == "recordings.jsonl"


def test_overrides_numbers_strings_lists_and_bools():
    cfg = load_config("kevin", ["dataset.batch_size=4", "model=Qwen/Qwen3-8B", "eval.devices=0,1",
                                "stages=[{start_step: 0, weights: {format: 1, correctness: 0}}, {start_step: 5}]",
                                "reward.partial_credit=true", "optim.lr=3e-5", "rag.index=null", "tags=[a, b]"])
    assert cfg.dataset.batch_size == 4 and isinstance(cfg.dataset.batch_size, int)
    assert cfg.model == "Qwen/Qwen3-8B"
    assert cfg.eval.devices == [0, 1]
    assert [s.start_step for s in cfg.stages] == [0, 5] and cfg.stages[0].weights == {"format": 1.0, "correctness": 0.0}
    assert cfg.reward.partial_credit is True and cfg.optim.lr == pytest.approx(3e-5)
    assert cfg.tags == ["a", "b"]
    assert cfg.overrides[0] == "dataset.batch_size=4"


def test_parse_override_uses_yaml_scalars():
    assert parse_override("a.b=4") == ("a.b", 4)
    assert parse_override("a=1.5") == ("a", 1.5)
    assert parse_override("a=yes_please") == ("a", "yes_please")
    assert parse_override("a=[1, 2]") == ("a", [1, 2])
    assert parse_override("model=org/name=x") == ("model", "org/name=x")
    with pytest.raises(KrlError, match="KEY=VALUE"):
        parse_override("dataset.batch_size")


def test_unknown_key_names_the_nearest_valid_keys():
    with pytest.raises(KrlError) as err:
        load_config("kevin", ["dataset.batch_sise=4"])
    assert "dataset.batch_sise" in str(err.value) and "dataset.batch_size" in str(err.value)
    with pytest.raises(KrlError, match=r"optim\.lr"):
        load_config("kevin", ["lr=1e-4"])
    with pytest.raises(KrlError, match=r"Did you mean: dataset"):
        load_config("kevin", ["datset.group_size=2"])


def test_unknown_key_in_a_yaml_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"extends": "demo", "sampling": {"temprature": 0.7}}))
    with pytest.raises(KrlError, match=r"sampling\.temperature"):
        load_config(str(path))


def test_bad_type_says_which_key_and_what_was_expected():
    with pytest.raises(KrlError) as err:
        load_config("kevin", ["dataset.batch_size=many"])
    text = str(err.value)
    assert "dataset.batch_size" in text and "integer" in text and "many" in text
    with pytest.raises(KrlError, match=r"kernel\.backend.*'cuda', 'triton' or 'torch'"):
        load_config("kevin", ["kernel.backend=cude"])
    with pytest.raises(KrlError, match=r"stages.*sped.*speed"):
        load_config("kevin", ["stages=[{start_step: 0, weights: {sped: 1}}]"])
    with pytest.raises(KrlError, match=r"'eval\.devices': Input should be 'auto' or 'cpu' or a valid list \(got 'gpu'\)"):
        load_config("kevin", ["eval.devices=gpu"])
    with pytest.raises(KrlError, match="increasing"):
        load_config("kevin", ["stages=[{start_step: 5}, {start_step: 2}]"])


def test_unknown_preset_suggests_one():
    with pytest.raises(KrlError, match="Did you mean: kevin"):
        load_config("kevn")
    with pytest.raises(KrlError, match="does not exist"):
        load_config("/nonexistent/x.yaml")


def test_yaml_file_extends_a_preset_and_a_sibling_file(tmp_path):
    (tmp_path / "base.yaml").write_text("extends: demo\nmax_steps: 3\ndataset: {group_size: 3}\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\ndataset: {batch_size: 1}\n")
    cfg = load_config(str(tmp_path / "child.yaml"), ["seed=7"])
    assert cfg.backend == "replay" and cfg.max_steps == 3
    assert cfg.dataset.group_size == 3 and cfg.dataset.batch_size == 1 and cfg.seed == 7


def test_extends_cycle_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(KrlError, match="cycle"):
        load_config(str(tmp_path / "a.yaml"))


def test_flatten_and_config_diff():
    flat = flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": "x"})
    assert flat == {"a.b": 1, "a.c.d": [1, 2], "e": "x"}
    a = load_config("kevin")
    b = load_config("kevin", ["dataset.group_size=2", "model=other"])
    diff = config_diff(a, b, ignore=("overrides",))
    assert diff == {"dataset.group_size": (8, 2), "model": ("Qwen/Qwen3-32B", "other")}
    assert config_diff({"x": 1}, {"y": 2}) == {"x": (1, None), "y": (None, 2)}


def test_overrides_of_reports_keys_that_differ_from_the_preset():
    cfg = load_config("demo", ["dataset.batch_size=1", "max_turns=3"])  # max_turns=3 is already the demo value
    assert overrides_of(cfg) == {"dataset.batch_size": 1}
    stored = cfg.model_dump(mode="json")  # as procman stores it in the registry
    assert overrides_of(stored) == {"dataset.batch_size": 1}
    assert overrides_of(load_config("kevin")) == {}
    assert overrides_of(load_config("kevin"), "single-turn") == {"early_stop.mode": "speedup", "max_turns": 4}


def test_with_overrides_accumulates_provenance_and_round_trips():
    cfg = load_config("demo", ["seed=1"])
    forked = with_overrides(cfg, ["seed=2", "reward.gamma=0.5"])
    assert forked.seed == 2 and forked.reward.gamma == 0.5
    assert forked.overrides == ["seed=1", "seed=2", "reward.gamma=0.5"]
    again = config_from_dict(yaml.safe_load(forked.to_yaml()))
    assert again == forked


def test_every_contract_key_exists():
    keys = set(valid_keys())
    for key in ("model", "backend", "problems", "max_steps", "seed", "max_turns", "dataset.batch_size",
                "dataset.group_size", "kernel.backend", "kernel.precision", "eval.devices", "eval.correctness_trials",
                "eval.timing_trials", "eval.size", "reward.weights.speed", "reward.speed_mode", "reward.gamma",
                "reward.hack_penalty", "reward.partial_credit", "reward.normalise_std", "reward.leave_one_out",
                "stages", "loss.kind", "loss.substeps", "optim.lr", "optim.warmup_steps", "optim.schedule",
                "optim.grad_clip", "sampling.max_tokens", "sampling.temperature", "early_stop.mode",
                "early_stop.speedup_threshold", "checkpoint_every", "rag.index", "rag.k", "replay.path",
                "openai.base_url", "gpus", "tinker.base_model", "tinker.lora_rank", "tinker.base_url",
                "local.device", "local.dtype", "local.lora_rank", "name", "tags"):
        assert key in keys, key
    assert RunConfig().model_dump()  # defaults alone are valid


@pytest.mark.parametrize("override", ["dataset.group_size=10000000", "dataset.batch_size=10000000",
                                      "max_steps=100000000000000000000", "seed=100000000000000000000",
                                      "max_turns=100000", "gpus=100000", "eval.timing_trials=1000000000",
                                      "sampling.max_tokens=10000000000", "checkpoint_every=100000000000000000000"])
def test_values_beyond_sane_bounds_are_clean_errors(override):
    key = override.split("=")[0]
    with pytest.raises(KrlError, match=f"'{key}': Input should be less than or equal to"):
        load_config("demo", [override])
