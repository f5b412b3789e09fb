"""course.qwen35_weights: finding a checkpoint, reading only layer 3 and a few embedding rows, and errors that
say what to do. Every checkpoint here is a real file in tmp_path; nothing touches the network."""
import hashlib
import json

import pytest
import torch
from safetensors import safe_open

import course.qwen35_weights as weights
from course.qwen35_weights import (
    EMBEDDING_KEY,
    FIXTURE_DIR,
    CheckpointError,
    attention_shapes,
    find_checkpoint,
    load_attention_layer,
    load_config,
    load_embedding_rows,
    submodule_state,
)
from tests.checkpoints import (
    PREFIX,
    VOCAB,
    hub_snapshot,
    isolate,
    published_shard_name,
    real_like_tensors,
    write_checkpoint,
)

PROMPT_IDS = [97375, 101618, 98869, 3709, 116450, 99192]  # 今天天气不错，我们去公园
SHAPES = {
    "self_attn.q_proj.weight": (4096, 1024),
    "self_attn.k_proj.weight": (512, 1024),
    "self_attn.v_proj.weight": (512, 1024),
    "self_attn.o_proj.weight": (1024, 2048),
    "self_attn.q_norm.weight": (256,),
    "self_attn.k_norm.weight": (256,),
    "input_layernorm.weight": (1024,),
}


@pytest.fixture(autouse=True)
def no_model_around(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


@pytest.fixture
def real(tmp_path):
    """A single-file checkpoint with the real keys (values other than the fixture's)."""
    return write_checkpoint(tmp_path / "real")


def expected_layer(prefix=PREFIX):
    tensors = real_like_tensors()
    return {key[len(prefix):]: value for key, value in tensors.items() if key.startswith(prefix)}


def assert_same(got, expected):
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key].dtype == expected[key].dtype and torch.equal(got[key], expected[key]), key


# --- the shipped stand-in -------------------------------------------------------------------------

def test_without_a_model_the_stand_in_is_used_and_says_so(capsys):
    checkpoint = find_checkpoint()
    assert checkpoint.synthetic and checkpoint.origin == "course fixture"
    assert checkpoint.folder.resolve() == FIXTURE_DIR.resolve()
    layer = load_attention_layer(3)
    assert {key: tuple(value.shape) for key, value in layer.items()} == SHAPES
    assert all(value.dtype == torch.bfloat16 for value in layer.values())
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert line.startswith("第 3 层的权重：合成的替身（data/qwen35_layer3）") and "QWEN35_PATH" in line


def test_stand_in_has_exactly_the_real_keys_and_is_labelled():
    with safe_open(FIXTURE_DIR / "model.safetensors", framework="pt") as handle:
        keys, metadata = set(handle.keys()), handle.metadata()
    assert keys == {PREFIX + name for name in SHAPES} | {"fixture.embed_tokens.rows", "fixture.embed_tokens.ids"}
    assert metadata["format"] == "pt" and metadata["note"].startswith("synthetic stand-in")
    assert (FIXTURE_DIR / "model.safetensors").stat().st_size < 20e6


def test_stand_in_loads_into_transformers_qwen35_attention_unchanged():
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    text = transformers.AutoConfig.from_pretrained(FIXTURE_DIR).text_config
    layer = load_attention_layer(3, dtype=torch.float32, verbose=False)
    hf.Qwen3_5Attention(text, layer_idx=3).load_state_dict(submodule_state(layer, "self_attn"), strict=True)
    norm = hf.Qwen3_5RMSNorm(text.hidden_size, eps=text.rms_norm_eps)
    norm.load_state_dict(submodule_state(layer, "input_layernorm"), strict=True)


def test_stand_in_is_reproduced_byte_for_byte_by_its_script(tmp_path):
    from data.make_qwen35_fixture import write

    write(tmp_path)
    for name in ("config.json", "model.safetensors"):
        made, shipped = (tmp_path / name).read_bytes(), (FIXTURE_DIR / name).read_bytes()
        assert hashlib.sha256(made).digest() == hashlib.sha256(shipped).digest(), (
            f"data/qwen35_layer3/{name} differs from what data/make_qwen35_fixture.py writes; run the script")


def test_stand_in_embedding_rows_in_the_order_asked():
    with safe_open(FIXTURE_DIR / "model.safetensors", framework="pt") as handle:
        rows, ids = handle.get_tensor("fixture.embed_tokens.rows"), handle.get_tensor("fixture.embed_tokens.ids")
    assert ids.tolist() == PROMPT_IDS
    got = load_embedding_rows(torch.tensor([3709, 97375, 3709]), verbose=False)
    assert got.shape == (3, 1024) and got.dtype == torch.bfloat16
    assert torch.equal(got, rows[[3, 0, 3]])
    assert load_embedding_rows(PROMPT_IDS, dtype=torch.float32, verbose=False).dtype == torch.float32


def test_stand_in_refuses_ids_it_does_not_hold():
    with pytest.raises(CheckpointError, match=r"token ids \[5\] are not in .*model.safetensors.*今天天气不错"
                                              r".*QWEN35_PATH"):
        load_embedding_rows([97375, 5], verbose=False)


def test_stand_in_holds_only_layer_3():
    with pytest.raises(CheckpointError, match=r"model.safetensors has no tensor "
                                              r"'model.language_model.layers.7.self_attn.q_proj.weight'.*only layer 3"):
        load_attention_layer(7, verbose=False)


# --- real checkpoints: single file, shards, and how they are found --------------------------------

def test_single_file_checkpoint_from_the_path_argument(real, capsys):
    checkpoint = find_checkpoint(real)
    assert not checkpoint.synthetic and checkpoint.origin == "path argument"
    assert_same(load_attention_layer(3, real), expected_layer())
    assert capsys.readouterr().out == f"第 3 层的权重：Qwen/Qwen3.5-0.8B，在 {real}（path argument）\n"
    assert find_checkpoint(real / "config.json").folder == real  # a file inside the folder stands for it


def test_dtype_argument_casts_after_reading(real):
    layer = load_attention_layer(3, real, dtype=torch.float32, verbose=False)
    expected = expected_layer()
    assert all(layer[key].dtype == torch.float32 and torch.equal(layer[key], expected[key].float()) for key in expected)


def test_embedding_rows_come_from_the_real_table(real):
    rows = load_embedding_rows([5, 0, VOCAB - 1, 5], real, verbose=False)
    assert rows.shape == (4, 1024) and rows.dtype == torch.bfloat16
    assert rows[:, 0].float().mul(1024).tolist() == [5, 0, VOCAB - 1, 5]
    assert load_embedding_rows([], real, verbose=False).shape == (0, 1024)
    with pytest.raises(CheckpointError, match=rf"token id {VOCAB} is out of range: .* has {VOCAB} rows"):
        load_embedding_rows([VOCAB], real, verbose=False)


@pytest.mark.parametrize("shards, shard_name", [
    (2, None),
    (3, None),
    (1, published_shard_name),  # how Qwen3.5-0.8B ships
])
def test_sharded_checkpoint_with_an_index(tmp_path, shards, shard_name):
    folder = write_checkpoint(tmp_path / "sharded", shards=shards, shard_name=shard_name)
    assert not (folder / "model.safetensors").exists()
    assert_same(load_attention_layer(3, folder, verbose=False), expected_layer())
    assert load_embedding_rows([7], folder, verbose=False)[0, 0].item() == 7 / 1024


def test_only_the_needed_tensors_are_read(real, monkeypatch):
    read = []

    class Spy:
        def __init__(self, *args, **kwargs):
            self.handle = safe_open(*args, **kwargs)

        def __enter__(self):
            self.inner = self.handle.__enter__()
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def get_tensor(self, key):
            read.append(key)
            return self.inner.get_tensor(key)

        def get_slice(self, key):
            read.append(f"slice of {key}")
            return self.inner.get_slice(key)

    monkeypatch.setattr(weights, "safe_open", Spy)
    load_attention_layer(3, real, verbose=False)
    assert sorted(read) == sorted(PREFIX + name for name in SHAPES)
    read.clear()
    load_embedding_rows([1, 2], real, verbose=False)
    assert read == [f"slice of {EMBEDDING_KEY}"]


def test_environment_variable_is_used_and_the_argument_beats_it(tmp_path, monkeypatch, real):
    other = write_checkpoint(tmp_path / "other", shards=2)
    monkeypatch.setenv("QWEN35_PATH", str(other))
    assert find_checkpoint() == weights.Checkpoint(other, "$QWEN35_PATH", synthetic=False)
    assert find_checkpoint(real).folder == real


def test_hugging_face_cache_layout_is_found(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    snapshot = hub_snapshot(hub, shards=1, shard_name=published_shard_name)
    checkpoint = find_checkpoint()
    assert checkpoint == weights.Checkpoint(snapshot, "Hugging Face cache", synthetic=False)
    assert_same(load_attention_layer(3, verbose=False), expected_layer())


def test_hf_home_and_xdg_cache_home_are_followed(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    snapshot = hub_snapshot(tmp_path / "hf" / "hub")
    assert find_checkpoint().folder == snapshot
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    snapshot = hub_snapshot(tmp_path / "xdg" / "huggingface" / "hub")
    assert find_checkpoint().folder == snapshot


def test_cache_prefers_refs_main_and_skips_incomplete_snapshots(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    hub_snapshot(hub, "old", main=False)
    current = hub_snapshot(hub, "current")
    assert find_checkpoint().folder == current
    (current / "model.safetensors").unlink()  # only config.json left, as after fetching the tokenizer alone
    assert find_checkpoint().folder.name == "old"
    shards = hub_snapshot(hub, "current", shards=2)
    (shards / "model-00002-of-00002.safetensors").unlink()  # an interrupted download
    assert find_checkpoint().folder.name == "old"


def test_preference_order_argument_env_cache_fixture(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert find_checkpoint().origin == "course fixture"
    cached = hub_snapshot(hub)
    assert find_checkpoint().folder == cached
    env = write_checkpoint(tmp_path / "env")
    monkeypatch.setenv("QWEN35_PATH", str(env))
    assert find_checkpoint().folder == env
    argument = write_checkpoint(tmp_path / "argument")
    assert find_checkpoint(argument).folder == argument


def test_a_copy_of_the_stand_in_is_still_labelled_synthetic(tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("config.json", "model.safetensors"):
        (copy / name).write_bytes((FIXTURE_DIR / name).read_bytes())
    monkeypatch.setenv("QWEN35_PATH", str(copy))
    assert find_checkpoint().synthetic


def test_load_config_reads_the_chosen_checkpoint(real):
    assert load_config().vocab_size == 248_320
    assert load_config(real).vocab_size == VOCAB
    assert attention_shapes(load_config()) == SHAPES


# --- errors name the file and the key and say what to do -----------------------------------------

def test_a_path_that_is_not_a_checkpoint(tmp_path, monkeypatch):
    with pytest.raises(CheckpointError, match=r"nowhere \(path argument\) does not exist; download .*hf download"):
        find_checkpoint(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"empty \(path argument\) has no config.json.*QWEN35_PATH"):
        find_checkpoint(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"has neither model.safetensors nor model.safetensors.index.json"):
        find_checkpoint(tmp_path / "empty")
    monkeypatch.setenv("QWEN35_PATH", str(tmp_path / "typo"))
    with pytest.raises(CheckpointError, match=r"typo \(\$QWEN35_PATH\) does not exist"):
        find_checkpoint()


def test_missing_shard_file(tmp_path):
    folder = write_checkpoint(tmp_path / "sharded", shards=2)
    (folder / "model-00001-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00001-of-00002.safetensors is missing \(it should hold "
                                              r"'model.language_model.*download the model again"):
        load_attention_layer(3, folder, verbose=False)


def test_missing_key_in_a_real_checkpoint(tmp_path):
    tensors = real_like_tensors()
    del tensors[PREFIX + "self_attn.k_norm.weight"]
    folder = write_checkpoint(tmp_path / "partial", tensors)
    with pytest.raises(CheckpointError, match=r"model.safetensors has no tensor "
                                              r"'model.language_model.layers.3.self_attn.k_norm.weight'; is this"):
        load_attention_layer(3, folder, verbose=False)


def test_wrong_shape(tmp_path):
    tensors = real_like_tensors()
    tensors[PREFIX + "self_attn.o_proj.weight"] = tensors[PREFIX + "self_attn.o_proj.weight"].T.contiguous()
    folder = write_checkpoint(tmp_path / "transposed", tensors)
    with pytest.raises(CheckpointError, match=r"layers.3.self_attn.o_proj.weight in .*model.safetensors has shape "
                                              r"\[2048, 1024\], expected \[1024, 2048\]"):
        load_attention_layer(3, folder, verbose=False)


def test_wrong_dtype_names_the_way_out(tmp_path):
    tensors = {key: value.float() for key, value in real_like_tensors().items()}
    folder = write_checkpoint(tmp_path / "float32", tensors)
    with pytest.raises(CheckpointError, match=r"q_proj.weight in .* is torch.float32, expected torch.bfloat16 as "
                                              r"config.json says.*pass dtype="):
        load_attention_layer(3, folder, dtype=torch.float32, verbose=False)
    with pytest.raises(CheckpointError, match=rf"{EMBEDDING_KEY} in .* is torch.float32, expected torch.bfloat16"):
        load_embedding_rows([1], folder, verbose=False)


def test_layers_that_are_not_softmax_attention():
    with pytest.raises(CheckpointError, match=r"layer 2 is a linear_attention \(Gated DeltaNet\) layer; the "
                                              r"softmax-attention layers are \[3, 7, 11, 15, 19, 23\]"):
        load_attention_layer(2, verbose=False)
    with pytest.raises(CheckpointError, match=r"layer 24 does not exist: .*config.json has 24 layers \(0 to 23\)"):
        load_attention_layer(24, verbose=False)


def test_broken_index(tmp_path):
    folder = write_checkpoint(tmp_path / "sharded", shards=2)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"model.safetensors.index.json is not a safetensors index"):
        load_attention_layer(3, folder, verbose=False)


def test_submodule_state_strips_the_prefix():
    state = {"self_attn.q_proj.weight": 1, "self_attn.k_norm.weight": 2, "input_layernorm.weight": 3}
    assert submodule_state(state, "self_attn") == {"q_proj.weight": 1, "k_norm.weight": 2}
    assert submodule_state(state, "self_attn.") == {"q_proj.weight": 1, "k_norm.weight": 2}
