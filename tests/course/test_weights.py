"""course.qwen35_weights: finding a checkpoint, reading only layer 3 (softmax attention), layers 0-2 (Gated
DeltaNet), the MLPs of layers 0-3 and a few embedding rows, the stand-in of layers 0-2 and of the MLPs made from its
seed, and errors that say what to do.
Every checkpoint here is a real file in tmp_path; nothing touches the network."""
import functools
import hashlib
import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

import course.qwen35_weights as weights
from course import qwen35_stand_in
from course.qwen35 import read_config
from course.qwen35_weights import (
    EMBEDDING_KEY,
    FIXTURE_DIR,
    CheckpointError,
    attention_shapes,
    find_checkpoint,
    linear_attention_shapes,
    load_attention_layer,
    load_config,
    load_embedding_rows,
    load_layer,
    load_linear_attention_layer,
    load_mlp,
    mlp_shapes,
    stand_in_file,
    stand_in_mlp_file,
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
# A Gated DeltaNet layer of Qwen3.5-0.8B: 16 key and 16 value heads of 128, conv kernel 4, hidden 1024.
LINEAR_SHAPES = {
    "linear_attn.in_proj_qkv.weight": (6144, 1024),
    "linear_attn.in_proj_z.weight": (2048, 1024),
    "linear_attn.in_proj_b.weight": (16, 1024),
    "linear_attn.in_proj_a.weight": (16, 1024),
    "linear_attn.conv1d.weight": (6144, 1, 4),
    "linear_attn.dt_bias": (16,),
    "linear_attn.A_log": (16,),
    "linear_attn.norm.weight": (128,),
    "linear_attn.out_proj.weight": (1024, 2048),
    "input_layernorm.weight": (1024,),
}
FLOAT32 = {"linear_attn.A_log", "linear_attn.norm.weight"}  # as the published checkpoint stores them
# Every layer's MLP and the norm before it: intermediate_size 3584, hidden 1024.
MLP_SHAPES = {
    "mlp.gate_proj.weight": (3584, 1024),
    "mlp.up_proj.weight": (3584, 1024),
    "mlp.down_proj.weight": (1024, 3584),
    "post_attention_layernorm.weight": (1024,),
}


def linear_prefix(layer: int) -> str:
    return f"model.language_model.layers.{layer}."


@functools.cache
def _stand_in_layer(layer: int) -> dict[str, torch.Tensor]:
    return qwen35_stand_in.linear_layer_tensors(read_config(FIXTURE_DIR), layer)


def linear_like_tensors(layers=(0, 1, 2)) -> dict[str, torch.Tensor]:
    """Gated DeltaNet ``layers`` with the real keys, shapes and dtypes and values other than the stand-in's (so a
    test can tell the two apart), to add to ``real_like_tensors()``."""
    return {key: -value for layer in layers for key, value in _stand_in_layer(layer).items()}


@functools.cache
def _stand_in_mlp(layer: int) -> dict[str, torch.Tensor]:
    return qwen35_stand_in.mlp_tensors(read_config(FIXTURE_DIR), layer)


def mlp_like_tensors(layers=(0, 1, 2, 3)) -> dict[str, torch.Tensor]:
    """The MLPs and post-attention norms of ``layers`` with the real keys, shapes and dtype and values other than the
    stand-in's, to add to ``real_like_tensors()``."""
    return {key: -value for layer in layers for key, value in _stand_in_mlp(layer).items()}


def expected_linear(layer: int, tensors: dict) -> dict[str, torch.Tensor]:
    return {key[len(linear_prefix(layer)):]: value for key, value in tensors.items()
            if key.startswith(linear_prefix(layer))}


@pytest.fixture(scope="module")
def course_cache(tmp_path_factory):
    """The course's cache for this module's tests: the stand-in's layers 0-2 are made there once."""
    return tmp_path_factory.mktemp("course-cache")


@pytest.fixture(autouse=True)
def no_model_around(monkeypatch, tmp_path, course_cache):
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(course_cache))


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


def test_a_cache_that_cannot_be_read_is_a_clear_error(monkeypatch, tmp_path):
    """A cache this user may not look into (another user's home, say) is said, with what to set, instead of a
    traceback from the stat that fails: a name too long for the file system fails it the same way for root."""
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / ("x" * 300)))
    monkeypatch.setattr(weights, "partial_folder", lambda: tmp_path / ("x" * 300) / "qwen35")
    with pytest.raises(CheckpointError, match="cannot be read.*ATTENTION_COURSE_CACHE"):
        weights.find_checkpoint()


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
                                              r"'model.language_model.layers.7.self_attn.q_proj.weight'.*only layers "
                                              r"0-3 \(Gated DeltaNet layers 0-2, attention layer 3, their MLPs\)"):
        load_attention_layer(7, verbose=False)


# --- the stand-in's Gated DeltaNet layers 0-2, made from the seed ---------------------------------------------

def test_linear_stand_in_is_made_on_first_use_and_says_so(capsys):
    layer = load_linear_attention_layer(0)
    assert {key: tuple(value.shape) for key, value in layer.items()} == LINEAR_SHAPES
    assert {key for key, value in layer.items() if value.dtype == torch.float32} == FLOAT32
    assert all(value.dtype == torch.bfloat16 for key, value in layer.items() if key not in FLOAT32)
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert line.startswith("第 0 层的权重：合成的替身（data/qwen35_layer3 里只有配置和第 3 层的注意力，其余按固定种子生成，存在 ") and "--layers 0-3" in line
    assert str(stand_in_file(0).parent) in line
    file = stand_in_file(0)
    assert file.is_file() and hashlib.sha256(file.read_bytes()).hexdigest() == qwen35_stand_in.SHA256[0]
    with safe_open(file, framework="pt") as handle:
        assert handle.metadata()["note"].startswith("synthetic stand-in for Qwen/Qwen3.5-0.8B layer 0")
        assert set(handle.keys()) == {linear_prefix(0) + name for name in LINEAR_SHAPES}
    assert load_linear_attention_layer(0, dtype=torch.float32, verbose=False)["linear_attn.dt_bias"].dtype == torch.float32


def test_linear_stand_in_loads_into_transformers_gated_deltanet_unchanged():
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    text = transformers.AutoConfig.from_pretrained(FIXTURE_DIR).text_config
    for index in (0, 1, 2):
        assert text.layer_types[index] == "linear_attention"
        layer = load_linear_attention_layer(index, dtype=torch.float32, verbose=False)
        module = hf.Qwen3_5GatedDeltaNet(text, layer_idx=index)
        assert {k: tuple(v.shape) for k, v in module.state_dict().items()} == submodule_state(LINEAR_SHAPES,
                                                                                               "linear_attn")
        module.load_state_dict(submodule_state(layer, "linear_attn"), strict=True)
        norm = hf.Qwen3_5RMSNorm(text.hidden_size, eps=text.rms_norm_eps)
        norm.load_state_dict(submodule_state(layer, "input_layernorm"), strict=True)
        with torch.no_grad():
            out = module(norm(load_embedding_rows(list(PROMPT_IDS), dtype=torch.float32, verbose=False)[None]))
        assert out.shape == (1, len(PROMPT_IDS), 1024) and out.isfinite().all()


def test_linear_stand_in_is_what_the_script_writes_and_what_its_readme_records(tmp_path):
    from data.make_qwen35_fixture import write_linear_layers

    readme = (FIXTURE_DIR / "README.md").read_text(encoding="utf-8")
    for index, file in write_linear_layers(tmp_path).items():
        load_linear_attention_layer(index, verbose=False)  # made by the course, in its cache
        made, written = stand_in_file(index).read_bytes(), file.read_bytes()
        assert made == written, f"the course and data/make_qwen35_fixture.py make different layer {index}"
        digest = hashlib.sha256(written).hexdigest()
        assert digest == qwen35_stand_in.SHA256[index], (
            f"layer {index}'s stand-in changed: if on purpose, record its SHA-256 {digest} in "
            "course/qwen35_stand_in.py and data/qwen35_layer3/README.md")
        assert f"| {index} | `{digest}` |" in readme
        assert len(written) < 22e6


def test_linear_stand_in_is_read_from_the_cache_not_made_again(monkeypatch):
    expected = load_linear_attention_layer(1, verbose=False)

    def made_again(*args):
        raise AssertionError("the stand-in was made again although the cache holds it")

    monkeypatch.setattr(qwen35_stand_in, "linear_layer_bytes", made_again)
    assert_same(load_linear_attention_layer(1, verbose=False), expected)


def test_a_damaged_stand_in_file_is_made_again():
    expected = load_linear_attention_layer(2, verbose=False)
    file = stand_in_file(2)
    data = bytearray(file.read_bytes())
    data[-1] ^= 1  # one bit of out_proj, as a disk might flip it
    file.write_bytes(bytes(data))
    assert_same(load_linear_attention_layer(2, verbose=False), expected)
    assert hashlib.sha256(file.read_bytes()).hexdigest() == qwen35_stand_in.SHA256[2]


def test_a_cache_that_cannot_be_written_still_gives_the_stand_in(tmp_path, monkeypatch):
    expected = load_linear_attention_layer(0, verbose=False)
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "a-file" / "cache"))  # no folder can be made there
    assert_same(load_linear_attention_layer(0, verbose=False), expected)
    assert not stand_in_file(0).exists()


def test_a_changed_recipe_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "fresh-cache"))
    monkeypatch.setitem(qwen35_stand_in.SHA256, 1, "0" * 64)
    with pytest.raises(CheckpointError, match=r"the stand-in of layer 1 made here has SHA-256 7028a05e\w+, not 0{64}: "
                                              r"the recipe in course/qwen35_stand_in.py .* was changed"):
        load_linear_attention_layer(1, verbose=False)
    assert not stand_in_file(1).exists()


@pytest.mark.parametrize("index", [0, 1, 2])
def test_linear_stand_in_values_are_shaped_as_its_readme_says(index):
    layer = {key: value.double() for key, value in load_linear_attention_layer(index, verbose=False).items()}
    a = layer["linear_attn.A_log"].exp()
    assert math.isclose(a.min(), 0.01, rel_tol=1e-5) and math.isclose(a.max(), 16, rel_tol=1e-5)
    ratios = a.sort().values.log().diff()
    assert torch.allclose(ratios, ratios.mean().expand_as(ratios), atol=1e-5)  # evenly spread in log
    dt_bias = layer["linear_attn.dt_bias"]
    assert (dt_bias - 1).abs().max() < 0.4
    decay = torch.exp(-a * F.softplus(dt_bias))  # exp(g) for a token whose in_proj_a projection is 0
    assert decay.max() > 0.98 and decay.min() < 1e-6
    norm = layer["linear_attn.norm.weight"]
    assert abs(norm.mean() - 1) < 0.02 and 0.03 < norm.std() < 0.07
    assert layer["input_layernorm.weight"].abs().mean() < 0.06
    conv = layer["linear_attn.conv1d.weight"]
    assert abs(conv[..., -1].mean() - 0.5) < 0.01 and abs(conv[..., :-1].mean()) < 0.01
    assert 0.09 < conv[..., :-1].std() < 0.11
    assert 0.0002 < layer["linear_attn.out_proj.weight"].std() < 0.0004
    others = [load_linear_attention_layer(other, verbose=False) for other in (0, 1, 2) if other != index]
    assert all(not torch.equal(other["linear_attn.in_proj_qkv.weight"].double(), layer["linear_attn.in_proj_qkv.weight"])
               for other in others)


def test_linear_stand_in_heads_differ_on_the_prompt():
    """β = sigmoid(b) and the decay exp(g) on the prompt's normed embeddings: each layer's heads sit at different
    levels, as the README says (mean β from about 0.1 to 0.9, decays from about 0.99 to about 0)."""
    rows = load_embedding_rows(list(PROMPT_IDS), dtype=torch.float32, verbose=False)
    for index in (0, 1, 2):
        layer = load_linear_attention_layer(index, dtype=torch.float32, verbose=False)
        x = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + layer["input_layernorm.weight"])
        beta = torch.sigmoid(x @ layer["linear_attn.in_proj_b.weight"].T).mean(0)
        g = -layer["linear_attn.A_log"].exp() * F.softplus(x @ layer["linear_attn.in_proj_a.weight"].T
                                                            + layer["linear_attn.dt_bias"])
        decay = g.exp().mean(0)
        assert beta.min() < 0.2 and beta.max() > 0.8, beta
        assert decay.min() < 0.01 and decay.max() > 0.95, decay


def test_stand_in_holds_only_linear_layers_0_to_2():
    with pytest.raises(CheckpointError, match=r"the synthetic stand-in holds only Gated DeltaNet layers \[0, 1, 2\] "
                                              r"\(and attention layer 3\), not layer 4; .*QWEN35_PATH"):
        load_linear_attention_layer(4, verbose=False)


def test_load_layer_follows_the_layer_types_and_adds_the_mlp(capsys):
    assert load_config().layer_types[:4] == ("linear_attention",) * 3 + ("full_attention",)
    assert {key: tuple(value.shape) for key, value in load_layer(3, verbose=False).items()} == SHAPES | MLP_SHAPES
    assert_same(load_layer(3, verbose=False), {**load_attention_layer(3, verbose=False), **load_mlp(3, verbose=False)})
    for index in (0, 1, 2):
        assert_same(load_layer(index, verbose=False),
                    {**load_linear_attention_layer(index, verbose=False), **load_mlp(index, verbose=False)})
    assert load_layer(1, dtype=torch.float32, verbose=False)["mlp.up_proj.weight"].dtype == torch.float32
    capsys.readouterr()
    load_layer(2)
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and line.startswith("第 2 层的权重：合成的替身") and "--layers 0-3" in line
    with pytest.raises(CheckpointError, match=r"layer 24 does not exist"):
        load_layer(24, verbose=False)


# --- the stand-in's MLPs of layers 0-3, made from the seed -----------------------------------------------------

def test_mlp_stand_in_is_made_on_first_use_and_says_so(capsys):
    layer = load_mlp(3)
    assert {key: tuple(value.shape) for key, value in layer.items()} == MLP_SHAPES
    assert all(value.dtype == torch.bfloat16 for value in layer.values())
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert line.startswith("第 3 层 MLP 的权重：合成的替身（data/qwen35_layer3 里只有配置和第 3 层的注意力，其余按固定种子生成，存在 ") and "--layers 0-3" in line
    assert str(stand_in_mlp_file(3).parent) in line
    file = stand_in_mlp_file(3)
    assert file.is_file() and hashlib.sha256(file.read_bytes()).hexdigest() == qwen35_stand_in.MLP_SHA256[3]
    with safe_open(file, framework="pt") as handle:
        assert handle.metadata()["note"].startswith("synthetic stand-in for Qwen/Qwen3.5-0.8B layer 3's MLP")
        assert set(handle.keys()) == {linear_prefix(3) + name for name in MLP_SHAPES}
    with safe_open(FIXTURE_DIR / "model.safetensors", framework="pt") as handle:
        assert not any(".mlp." in key or "post_attention" in key for key in handle.keys())  # the shipped file as it was


def test_mlp_stand_in_is_what_the_script_writes_and_what_its_readme_records(tmp_path):
    from data.make_qwen35_fixture import write_mlps

    readme = (FIXTURE_DIR / "README.md").read_text(encoding="utf-8")
    for index, file in write_mlps(tmp_path).items():
        load_mlp(index, verbose=False)
        made, written = stand_in_mlp_file(index).read_bytes(), file.read_bytes()
        assert made == written, f"the course and data/make_qwen35_fixture.py make different MLPs of layer {index}"
        digest = hashlib.sha256(written).hexdigest()
        assert digest == qwen35_stand_in.MLP_SHA256[index], (
            f"layer {index}'s stand-in MLP changed: if on purpose, record its SHA-256 {digest} in "
            "course/qwen35_stand_in.py and data/qwen35_layer3/README.md")
        assert f"| {index} | `{digest}` |" in readme
        assert len(written) < 23e6


def test_mlp_stand_in_is_read_from_the_cache_and_made_again_when_damaged(monkeypatch):
    expected = load_mlp(0, verbose=False)
    file = stand_in_mlp_file(0)
    data = bytearray(file.read_bytes())
    data[-1] ^= 1  # one bit of down_proj
    file.write_bytes(bytes(data))
    assert_same(load_mlp(0, verbose=False), expected)
    assert hashlib.sha256(file.read_bytes()).hexdigest() == qwen35_stand_in.MLP_SHA256[0]

    def made_again(*args):
        raise AssertionError("the stand-in MLP was made again although the cache holds it")

    monkeypatch.setattr(qwen35_stand_in, "mlp_bytes", made_again)
    assert_same(load_mlp(0, verbose=False), expected)


def test_a_changed_mlp_recipe_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "fresh-cache"))
    monkeypatch.setitem(qwen35_stand_in.MLP_SHA256, 2, "0" * 64)
    with pytest.raises(CheckpointError, match=r"the stand-in MLP of layer 2 made here has SHA-256 bb68ebbf\w+, not "
                                              r"0{64}: the recipe in course/qwen35_stand_in.py .* was changed"):
        load_mlp(2, verbose=False)
    assert not stand_in_mlp_file(2).exists()


def test_mlp_stand_in_holds_only_layers_0_to_3():
    with pytest.raises(CheckpointError, match=r"the synthetic stand-in holds only the MLPs of layers \[0, 1, 2, 3\], "
                                              r"not layer 4's; .*QWEN35_PATH"):
        load_mlp(4, verbose=False)
    with pytest.raises(CheckpointError, match=r"layer 24 does not exist"):
        load_mlp(24, verbose=False)


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_mlp_stand_in_values_are_shaped_as_its_readme_says(index):
    layer = {key: value.double() for key, value in load_mlp(index, verbose=False).items()}
    assert 0.019 < layer["mlp.gate_proj.weight"].std() < 0.021 and 0.019 < layer["mlp.up_proj.weight"].std() < 0.021
    assert 0.00039 < layer["mlp.down_proj.weight"].std() < 0.00041
    assert layer["post_attention_layernorm.weight"].abs().mean() < 0.06
    others = [load_mlp(other, verbose=False) for other in (0, 1, 2, 3) if other != index]
    assert all(not torch.equal(other["mlp.gate_proj.weight"].double(), layer["mlp.gate_proj.weight"]) for other in others)


def test_stand_in_layers_0_to_3_run_as_transformers_decoder_layers_and_keep_the_stream_sensible():
    """Hugging Face's own Qwen3_5DecoderLayer loads load_layer's dict unchanged; on the prompt, each half adds to
    the residual stream what the README says: a little under half of it for a Gated DeltaNet half, about a sixth
    for an MLP in layers 0-2; layer 3's attention (drawn for 06) about 17 times the stream."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    text = transformers.AutoConfig.from_pretrained(FIXTURE_DIR).text_config
    text._attn_implementation = "eager"
    stream = load_embedding_rows(list(PROMPT_IDS), dtype=torch.float32, verbose=False)[None]
    rotary = hf.Qwen3_5TextRotaryEmbedding(text)(stream, torch.arange(len(PROMPT_IDS))[None])
    # A layer alone gets no mask from the model around it: the attention layer is given the causal one.
    future = torch.ones(len(PROMPT_IDS), len(PROMPT_IDS), dtype=torch.bool).triu(1)
    causal = torch.zeros(future.shape).masked_fill(future, float("-inf"))[None, None]
    for index in range(4):
        layer = hf.Qwen3_5DecoderLayer(text, layer_idx=index)
        layer.load_state_dict(load_layer(index, dtype=torch.float32, verbose=False), strict=True)
        with torch.no_grad():
            normed = layer.input_layernorm(stream)
            mask = None if index < 3 else causal
            mixed = layer.linear_attn(normed) if index < 3 else layer.self_attn(normed, rotary, mask)[0]
            middle = stream + mixed
            mlp = layer.mlp(layer.post_attention_layernorm(middle))
            out = layer(stream, rotary, attention_mask=mask)
        assert torch.allclose(out, middle + mlp, atol=1e-6)
        mixer_share, mlp_share = mixed.norm() / stream.norm(), mlp.norm() / middle.norm()
        if index < 3:
            assert 0.35 < mixer_share < 0.5 and 0.12 < mlp_share < 0.22, (index, mixer_share, mlp_share)
        else:
            assert 14 < mixer_share < 20 and mlp_share < 0.05, (mixer_share, mlp_share)
        assert 0.003 < mlp.pow(2).mean().sqrt() < 0.008 and out.isfinite().all()
        stream = out


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


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The keys the loaders read from safetensors files, in order (a slice as ``slice of KEY``)."""
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
    return read


def test_only_the_needed_tensors_are_read(real, reads):
    read = reads
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


# --- Gated DeltaNet layers of a real checkpoint -------------------------------------------------------------------

@pytest.fixture
def real_with_linear(tmp_path):
    """A single-file checkpoint with layers 0-3's real keys, MLPs included (values other than the stand-in's)."""
    return write_checkpoint(tmp_path / "real-linear", {**real_like_tensors(), **linear_like_tensors(), **mlp_like_tensors()})


def test_linear_layers_of_a_real_checkpoint(real_with_linear, capsys):
    tensors = linear_like_tensors()
    for index in (0, 1, 2):
        assert_same(load_linear_attention_layer(index, real_with_linear), expected_linear(index, tensors))
    assert capsys.readouterr().out.splitlines()[0] == f"第 0 层的权重：Qwen/Qwen3.5-0.8B，在 {real_with_linear}（path argument）"
    assert_same(load_attention_layer(3, real_with_linear, verbose=False), expected_layer())


def test_linear_layers_of_a_sharded_checkpoint_in_the_hugging_face_cache(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    tensors = {**real_like_tensors(), **linear_like_tensors([0])}
    hub_snapshot(hub, shards=3, tensors=tensors)
    assert find_checkpoint().origin == "Hugging Face cache"
    assert_same(load_linear_attention_layer(0, verbose=False), expected_linear(0, tensors))


def test_only_the_linear_layers_tensors_are_read(real_with_linear, reads):
    load_linear_attention_layer(1, real_with_linear, verbose=False)
    assert sorted(reads) == sorted(linear_prefix(1) + name for name in LINEAR_SHAPES)
    reads.clear()
    load_mlp(3, real_with_linear, verbose=False)
    assert sorted(reads) == sorted(linear_prefix(3) + name for name in MLP_SHAPES)


def test_mlps_and_whole_layers_of_a_real_checkpoint(real_with_linear, capsys):
    tensors = {**linear_like_tensors(), **mlp_like_tensors()}
    for index in (0, 1, 2):
        assert_same(load_layer(index, real_with_linear), expected_linear(index, tensors))
    assert_same(load_mlp(3, real_with_linear, verbose=False), expected_linear(3, mlp_like_tensors([3])))
    assert_same(load_layer(3, real_with_linear, verbose=False),
                {**expected_layer(), **expected_linear(3, mlp_like_tensors([3]))})
    assert capsys.readouterr().out.splitlines()[0] == f"第 0 层的权重：Qwen/Qwen3.5-0.8B，在 {real_with_linear}（path argument）"


def test_mlp_wrong_shape_dtype_and_missing_key(tmp_path):
    key = linear_prefix(0) + "mlp.down_proj.weight"
    tensors = mlp_like_tensors([0])
    tensors[key] = tensors[key].T.contiguous()
    with pytest.raises(CheckpointError, match=r"layers.0.mlp.down_proj.weight in .* has shape \[3584, 1024\], "
                                              r"expected \[1024, 3584\]"):
        load_mlp(0, write_checkpoint(tmp_path / "transposed", tensors), verbose=False)
    tensors = mlp_like_tensors([0])
    tensors[key] = tensors[key].float()
    with pytest.raises(CheckpointError, match=r"down_proj.weight in .* is torch.float32, expected torch.bfloat16 as "
                                              r"config.json says; .*pass dtype="):
        load_mlp(0, write_checkpoint(tmp_path / "float32", tensors), verbose=False)
    tensors = mlp_like_tensors([0])
    del tensors[linear_prefix(0) + "post_attention_layernorm.weight"]
    with pytest.raises(CheckpointError, match=r"no tensor 'model.language_model.layers.0.post_attention_layernorm"
                                              r".weight'; is this"):
        load_mlp(0, write_checkpoint(tmp_path / "incomplete", tensors), verbose=False)


def test_a_partial_copy_fetched_without_mlps_says_how_to_add_them(tmp_path):
    folder = write_checkpoint(tmp_path / "partial", {**real_like_tensors(), **linear_like_tensors([0])},
                              metadata={"note": weights.PARTIAL_NOTE + " of Qwen/Qwen3.5-0.8B"})
    assert load_linear_attention_layer(0, folder, verbose=False)
    with pytest.raises(CheckpointError, match=r"no tensor 'model.language_model.layers.0.mlp.\S+'; this partial copy "
                                              r"holds only the layers it was fetched with; .*e.g. 0-3"):
        load_layer(0, folder, verbose=False)


def test_linear_attention_and_mlp_shapes_follow_the_config():
    assert linear_attention_shapes(load_config()) == LINEAR_SHAPES
    assert mlp_shapes(load_config()) == MLP_SHAPES
    assert weights.layer_shapes(load_config(), 2) == LINEAR_SHAPES | MLP_SHAPES
    assert weights.layer_shapes(load_config(), 3) == SHAPES | MLP_SHAPES


@pytest.mark.parametrize("name", sorted(weights.FLOAT32_ALLOWED))
def test_small_linear_tensors_may_be_bfloat16_or_float32(tmp_path, name):
    for dtype in (torch.bfloat16, torch.float32):
        tensors = linear_like_tensors([0])
        tensors[linear_prefix(0) + name] = tensors[linear_prefix(0) + name].to(dtype)
        folder = write_checkpoint(tmp_path / str(dtype), tensors)
        got = load_linear_attention_layer(0, folder, verbose=False)
        assert got[name].dtype == dtype and torch.equal(got[name], tensors[linear_prefix(0) + name])


@pytest.mark.parametrize("name, dtype, expected", [
    ("linear_attn.A_log", torch.float16, "torch.bfloat16 as config.json says, or torch.float32 as the published "
                                         "checkpoint keeps this tensor; "),
    ("linear_attn.out_proj.weight", torch.float32, "torch.bfloat16 as config.json says; "),
    ("linear_attn.conv1d.weight", torch.float16, "torch.bfloat16 as config.json says; "),
])
def test_other_linear_dtypes_are_refused(tmp_path, name, dtype, expected):
    tensors = linear_like_tensors([0])
    tensors[linear_prefix(0) + name] = tensors[linear_prefix(0) + name].to(dtype)
    folder = write_checkpoint(tmp_path / "converted", tensors)
    with pytest.raises(CheckpointError, match=rf"layers.0.{name} in .* is {dtype}, expected {expected}.*pass dtype="):
        load_linear_attention_layer(0, folder, verbose=False)


def test_linear_wrong_shape_and_missing_key(tmp_path):
    tensors = linear_like_tensors([0])
    key = linear_prefix(0) + "linear_attn.conv1d.weight"
    tensors[key] = tensors[key][:, 0].contiguous()  # [6144, 4]: the kernel without its channel axis
    with pytest.raises(CheckpointError, match=r"layers.0.linear_attn.conv1d.weight in .* has shape \[6144, 4\], "
                                              r"expected \[6144, 1, 4\]"):
        load_linear_attention_layer(0, write_checkpoint(tmp_path / "squeezed", tensors), verbose=False)
    tensors = linear_like_tensors([0])
    del tensors[linear_prefix(0) + "linear_attn.A_log"]
    with pytest.raises(CheckpointError, match=r"model.safetensors has no tensor "
                                              r"'model.language_model.layers.0.linear_attn.A_log'; is this"):
        load_linear_attention_layer(0, write_checkpoint(tmp_path / "incomplete", tensors), verbose=False)


def test_a_partial_copy_without_the_linear_layers_says_how_to_add_them(tmp_path):
    folder = write_checkpoint(tmp_path / "partial", metadata={"note": weights.PARTIAL_NOTE + " of Qwen/Qwen3.5-0.8B"})
    with pytest.raises(CheckpointError, match=r"no tensor 'model.language_model.layers.0.linear_attn.\S+'; this partial "
                                              r"copy holds only the layers it was fetched with; .*e.g. 0-3"):
        load_linear_attention_layer(0, folder, verbose=False)


def test_linear_loader_refuses_softmax_layers_and_says_which_reads_them():
    with pytest.raises(CheckpointError, match=r"layer 3 is a full_attention \(softmax-attention\) layer; the Gated "
                                              r"DeltaNet layers are \[0, 1, 2, 4, 5, 6, 8.*\(load_attention_layer reads"):
        load_linear_attention_layer(3, verbose=False)
    with pytest.raises(CheckpointError, match=r"layer -1 does not exist"):
        load_linear_attention_layer(-1, verbose=False)
