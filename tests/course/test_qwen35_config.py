"""course.qwen35: the text config read from a Qwen3.5 config.json, in its current and older layouts."""
import copy
import json

import pytest

from course.qwen35 import FULL_ATTENTION, LINEAR_ATTENTION, ConfigError, read_config, text_config_from_dict
from course.qwen35_weights import FIXTURE_DIR

FULL_LAYERS = (3, 7, 11, 15, 19, 23)
LINEAR_LAYERS = tuple(i for i in range(24) if i not in FULL_LAYERS)


@pytest.fixture(scope="module")
def shipped():
    return json.loads((FIXTURE_DIR / "config.json").read_text(encoding="utf-8"))


def test_shipped_config_has_the_facts_of_qwen35_0_8b():
    config = read_config(FIXTURE_DIR / "config.json")
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (1024, 24, 248_320)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (8, 2, 256)
    assert config.num_key_value_groups == 4
    assert (config.partial_rotary_factor, config.rotary_dim, config.rope_theta) == (0.25, 64, 10_000_000.0)
    assert config.rms_norm_eps == 1e-6
    assert config.layer_types == ((LINEAR_ATTENTION,) * 3 + (FULL_ATTENTION,)) * 6
    assert config.full_attention_layers == FULL_LAYERS
    assert config.linear_attention_layers == LINEAR_LAYERS and config.linear_attention_layers[:3] == (0, 1, 2)
    assert (config.linear_num_key_heads, config.linear_num_value_heads) == (16, 16)
    assert (config.linear_key_head_dim, config.linear_value_head_dim, config.linear_conv_kernel_dim) == (128, 128, 4)
    assert config.hidden_act == "silu" and config.intermediate_size == 3584  # every layer's MLP: 1024 → 3584 → 1024
    assert not config.attention_bias and config.tie_word_embeddings and config.dtype == "bfloat16"


def test_a_folder_stands_for_its_config_json():
    assert read_config(FIXTURE_DIR) == read_config(FIXTURE_DIR / "config.json")


def test_transformers_reads_the_shipped_config_the_same_way():
    transformers = pytest.importorskip("transformers")
    text = transformers.AutoConfig.from_pretrained(FIXTURE_DIR).text_config
    ours = read_config(FIXTURE_DIR)
    for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                 "vocab_size", "num_hidden_layers", "intermediate_size", "linear_num_key_heads",
                 "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                 "linear_conv_kernel_dim", "attention_bias", "tie_word_embeddings", "hidden_act"):
        assert getattr(ours, name) == getattr(text, name), name
    assert list(ours.layer_types) == list(text.layer_types)
    assert ours.rope_theta == text.rope_parameters["rope_theta"]
    assert ours.partial_rotary_factor == text.rope_parameters["partial_rotary_factor"]


def test_older_layouts_flat_rope_keys_rope_scaling_and_interval(shipped):
    text = copy.deepcopy(shipped["text_config"])
    rope = text.pop("rope_parameters")
    del text["layer_types"]
    flat = {**text, "rope_theta": rope["rope_theta"], "partial_rotary_factor": 0.25}
    in_scaling = {**text, "rope_scaling": {"rope_theta": rope["rope_theta"], "partial_rotary_factor": 0.25}}
    expected = read_config(FIXTURE_DIR)
    assert text_config_from_dict(flat) == expected  # the text part alone, no text_config wrapper
    assert text_config_from_dict({"text_config": in_scaling, "tie_word_embeddings": True}) == expected


def test_hidden_act_defaults_to_silu_when_a_file_leaves_it_out(shipped):
    raw = copy.deepcopy(shipped)
    del raw["text_config"]["hidden_act"]
    assert text_config_from_dict(raw) == read_config(FIXTURE_DIR)
    raw["text_config"]["hidden_act"] = "gelu"
    assert text_config_from_dict(raw).hidden_act == "gelu"


def test_rope_parameters_win_over_flat_keys(shipped):
    raw = copy.deepcopy(shipped)
    raw["text_config"]["rope_theta"] = 1.0  # a stale flat key next to the current dict
    assert text_config_from_dict(raw).rope_theta == 10_000_000.0


@pytest.mark.parametrize("key", ["head_dim", "rope_theta"])
def test_a_missing_field_is_named_with_the_file(shipped, tmp_path, key):
    raw = copy.deepcopy(shipped)
    raw["text_config"].pop(key, None)
    raw["text_config"]["rope_parameters"].pop(key, None)
    (tmp_path / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"config.json has no '{key}'.*Qwen3.5"):
        read_config(tmp_path)


def test_inconsistent_layer_types_and_missing_or_broken_files(shipped, tmp_path):
    raw = copy.deepcopy(shipped)
    raw["text_config"]["layer_types"] = raw["text_config"]["layer_types"][:-1]
    with pytest.raises(ConfigError, match="lists 23 layers but num_hidden_layers is 24"):
        text_config_from_dict(raw)
    with pytest.raises(ConfigError, match="does not exist"):
        read_config(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_config(tmp_path)
