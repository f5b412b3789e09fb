"""Load the weights of one Qwen3.5-0.8B layer (softmax attention or Gated DeltaNet, and its MLP), and token
embeddings, from a checkpoint.

One loader per thing, each keyed relative to the layer as Hugging Face's ``Qwen3_5DecoderLayer`` names its
parameters: ``load_attention_layer`` (a softmax-attention layer's ``self_attn`` and ``input_layernorm``),
``load_linear_attention_layer`` (a Gated DeltaNet layer's ``linear_attn`` and ``input_layernorm``), ``load_mlp``
(any layer's ``mlp`` and ``post_attention_layernorm``), and ``load_layer``, the whole decoder layer: the first or
the second by the layer's type, with ``load_mlp``'s. ``load_embedding_rows`` reads embedding rows.

Where the weights come from, in order:

1. the ``path`` argument (a checkpoint folder, or a file inside one);
2. the folder in the environment variable ``QWEN35_PATH``;
3. the Hugging Face cache, where ``hf download Qwen/Qwen3.5-0.8B`` puts the model
   (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``);
4. the partial copy ``course-weights qwen35 --layers 0-3`` fetches into the course's cache (the real
   config, those layers' weights and the embeddings of a few tokens; see ``course.tools.qwen35_fetch``);
5. the synthetic stand-in (random weights with the real keys, shapes, dtypes and config; see
   ``data/qwen35_layer3/README.md``): layer 3's attention and the config ship in ``data/qwen35_layer3/``; layers
   0-2's Gated DeltaNet and the MLPs of layers 0-3 are made from a seed the first time they are read
   (``course.qwen35_stand_in``) and kept in the course's cache.

A real model is used whenever one is found, and each loader prints one line saying which source it
read. Only the tensors asked for are read, memory-mapped, never the whole checkpoint (1.7 GB): a
checkpoint is a folder with ``config.json`` and either ``model.safetensors`` or sharded files listed
in ``model.safetensors.index.json``.
"""
import contextlib
import dataclasses
import json
import os
import uuid
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load as load_safetensors

from course import layout, qwen35_stand_in
from course.cache import CACHE_ENV, cache_dir
from course.qwen35 import FULL_ATTENTION, LINEAR_ATTENTION, TextConfig, read_config
from course.stored_tensors import StoredTensors

REPO_ID = "Qwen/Qwen3.5-0.8B"
ENV_VAR = "QWEN35_PATH"
# The stand-in ships in data/qwen35_layer3/ next to this package (a checkout, an editable install); an
# installed course carries it inside the package instead (see pyproject.toml), which is looked at first.
_PACKAGED_FIXTURE = Path(__file__).resolve().parent / "qwen35_layer3"
FIXTURE_DIR = (_PACKAGED_FIXTURE if (_PACKAGED_FIXTURE / "config.json").is_file()
               else layout.ROOT / layout.DATA / "qwen35_layer3")
LANGUAGE_MODEL = "model.language_model."
EMBEDDING_KEY = LANGUAGE_MODEL + "embed_tokens.weight"
# The stand-in and a partial copy cannot hold the 248,320 × 1024 embedding table; they keep a few rows under
# keys no real checkpoint has.
FIXTURE_ROWS_KEY = "fixture.embed_tokens.rows"
FIXTURE_IDS_KEY = "fixture.embed_tokens.ids"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
SYNTHETIC_NOTE = "synthetic stand-in"  # how the stand-in's safetensors metadata "note" starts
PARTIAL_NOTE = "partial copy"  # how a partial copy's note starts
# The published checkpoint keeps these small tensors of each Gated DeltaNet layer in float32 (A_log and norm.weight
# are; dt_bias, as far as is known, is bfloat16) and everything else in the config's dtype; other releases and
# conversions store them in the config's dtype. Either is accepted for these, and nothing else for the rest.
FLOAT32_ALLOWED = ("linear_attn.A_log", "linear_attn.dt_bias", "linear_attn.norm.weight")

_HOW_TO_GET_THE_MODEL = (f"download the model (`hf download {REPO_ID}`), set {ENV_VAR} "
                         "to a folder that holds its config.json and safetensors weights, or fetch only what the "
                         "course reads with `course-weights qwen35 --layers 0-3` (assignment 06 needs only layer 3)")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be found or read, or is not the model the course expects."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder, how it was found (``origin``), and whether it is the synthetic stand-in or a
    partial copy of the real model (some layers and embedding rows)."""

    folder: Path
    origin: str  # "path argument", "$QWEN35_PATH", "Hugging Face cache", "course cache" or "course fixture"
    synthetic: bool
    partial: bool = False

    def describe(self, layers: str = "3", generated: bool = False) -> str:
        """One line for people: what these weights are and where they come from; ``layers`` is what the line
        suggests fetching (``course-weights qwen35 --layers LAYERS``) instead of the stand-in. ``generated``: the
        weights are (partly) the stand-in's layers that the course generates into its cache, not the shipped ones."""
        if self.synthetic:
            where = _display(self.folder)
            if generated:
                where = f"{where} 里只有配置和第 3 层的注意力，其余按固定种子生成，存在 {stand_in_folder()}"
            return (f"合成的替身（{where}）：格式和真模型一样，数值是随机的，不是训练好的模型；"
                    f"要用真模型，运行 `course-weights qwen35 --layers {layers}`、设 {ENV_VAR}，或下载 {REPO_ID}")
        if self.partial:
            return f"{REPO_ID}，在 {self.folder}（课程读的那些张量，由 `course-weights qwen35` 取来）"
        return f"{REPO_ID}，在 {self.folder}（{self.origin}）"


def find_checkpoint(path=None) -> Checkpoint:
    """The checkpoint the loaders will read: ``path``, then ``$QWEN35_PATH``, the Hugging Face cache, the
    partial copy in the course's cache, and last the shipped stand-in. A path that is given (argument or
    variable) must be a checkpoint."""
    if path is not None:
        return _checked(Path(path), "path argument")
    if os.environ.get(ENV_VAR):
        return _checked(Path(os.environ[ENV_VAR]), f"${ENV_VAR}")
    cached = _from_hf_cache()
    if cached is not None:
        return cached
    try:
        partial = (partial_folder() / SINGLE_FILE).is_file()
    except OSError as e:  # a cache in another user's home
        raise CheckpointError(f"the course's cache {cache_dir()} cannot be read ({e.strerror}): set "
                              f"${CACHE_ENV} to a folder this user can read") from None
    if partial:
        return _checked(partial_folder(), "course cache")
    return _checked(FIXTURE_DIR, "course fixture")


def cache_folder() -> Path:
    """The course cache's folder of Qwen3.5 weights: the partial copy and the stand-in's layers."""
    return cache_dir() / "qwen35"


def partial_folder() -> Path:
    """Where ``course-weights qwen35`` keeps the partial copy of the real model."""
    return cache_folder() / "Qwen3.5-0.8B-partial"


def stand_in_folder() -> Path:
    """Where the course keeps the stand-in's Gated DeltaNet layers and MLPs once it has made them."""
    return cache_folder() / "stand-in"


def stand_in_file(layer: int) -> Path:
    """The stand-in's file of Gated DeltaNet layer ``layer`` (one of ``qwen35_stand_in.LINEAR_LAYERS``)."""
    return stand_in_folder() / f"layer-{layer}.safetensors"


def stand_in_mlp_file(layer: int) -> Path:
    """The stand-in's file of layer ``layer``'s MLP and post-attention norm (one of ``qwen35_stand_in.MLP_LAYERS``)."""
    return stand_in_folder() / f"mlp-{layer}.safetensors"


def load_config(path=None, *, verbose: bool = False) -> TextConfig:
    """The text model's configuration (``course.qwen35.TextConfig``) of the checkpoint ``find_checkpoint`` picks."""
    checkpoint = find_checkpoint(path)
    if verbose:
        print(f"配置：{checkpoint.describe()}")
    return read_config(checkpoint.folder / "config.json")


def load_attention_layer(layer: int = 3, path=None, dtype=None, *, verbose: bool = True) -> dict[str, torch.Tensor]:
    """The weights of full-attention layer ``layer``, keyed relative to the layer.

    Returns (with the shapes of Qwen3.5-0.8B: ``H = 8`` query heads, ``Hkv = 2``, ``D = 256``, hidden 1024):

    - ``self_attn.q_proj.weight [H·2·D, hidden]`` = ``[4096, 1024]``: each head's ``2·D`` rows are
      ``[query_h | gate_h]``;
    - ``self_attn.k_proj.weight``, ``self_attn.v_proj.weight [Hkv·D, hidden]`` = ``[512, 1024]``;
    - ``self_attn.o_proj.weight [hidden, H·D]`` = ``[1024, 2048]``;
    - ``self_attn.q_norm.weight``, ``self_attn.k_norm.weight [D]`` = ``[256]`` (zero-centred: scale ``1 + w``);
    - ``input_layernorm.weight [hidden]`` = ``[1024]`` (zero-centred).

    A module with ``self_attn`` and ``input_layernorm`` children loads it with ``load_state_dict``; an
    attention module alone loads ``submodule_state(weights, "self_attn")``. Tensors keep the stored
    dtype (bfloat16) unless ``dtype`` asks for another.
    """
    checkpoint = find_checkpoint(path)
    config = read_config(checkpoint.folder / "config.json")
    _check_layer(layer, config, checkpoint, FULL_ATTENTION)
    tensors = _TensorFiles(checkpoint.folder)
    prefix = f"{LANGUAGE_MODEL}layers.{layer}."
    weights = {name: tensors.read(prefix + name, shape, _stored_dtype(config), checkpoint)
               for name, shape in attention_shapes(config).items()}
    if verbose:
        print(f"第 {layer} 层的权重：{checkpoint.describe()}")
    return _cast(weights, dtype)


def load_linear_attention_layer(layer: int, path=None, dtype=None, *, verbose: bool = True) -> dict[str, torch.Tensor]:
    """The weights of Gated DeltaNet (linear-attention) layer ``layer``, keyed relative to the layer.

    Returns (with the shapes of Qwen3.5-0.8B: ``Hk = Hv = 16`` key and value heads of ``Dk = Dv = 128``,
    kernel ``K = 4``, hidden 1024; ``conv_dim = 2·Hk·Dk + Hv·Dv`` = 6144):

    - ``linear_attn.in_proj_qkv.weight [conv_dim, hidden]`` = ``[6144, 1024]``: rows ``[q | k | v]``, each
      head's rows together;
    - ``linear_attn.in_proj_z.weight [Hv·Dv, hidden]`` = ``[2048, 1024]`` (the output gate);
    - ``linear_attn.in_proj_b.weight``, ``linear_attn.in_proj_a.weight [Hv, hidden]`` = ``[16, 1024]``;
    - ``linear_attn.conv1d.weight [conv_dim, 1, K]`` = ``[6144, 1, 4]`` (depthwise, no bias);
    - ``linear_attn.dt_bias``, ``linear_attn.A_log [Hv]`` = ``[16]``;
    - ``linear_attn.norm.weight [Dv]`` = ``[128]`` (the gated output norm: it scales by ``w``, not ``1 + w``);
    - ``linear_attn.out_proj.weight [hidden, Hv·Dv]`` = ``[1024, 2048]``;
    - ``input_layernorm.weight [hidden]`` = ``[1024]`` (zero-centred: scale ``1 + w``).

    Hugging Face's ``Qwen3_5GatedDeltaNet`` loads ``submodule_state(weights, "linear_attn")`` unchanged; a module
    with ``linear_attn`` and ``input_layernorm`` children loads the whole dict. Tensors keep the stored dtype unless
    ``dtype`` asks for another: bfloat16, except ``A_log`` and ``norm.weight``, which the published checkpoint and
    the stand-in keep in float32 (``FLOAT32_ALLOWED`` lists what may be either).
    """
    checkpoint = find_checkpoint(path)
    config = read_config(checkpoint.folder / "config.json")
    _check_layer(layer, config, checkpoint, LINEAR_ATTENTION)
    prefix = f"{LANGUAGE_MODEL}layers.{layer}."
    read = _layer_reader(checkpoint, layer, qwen35_stand_in.LINEAR_LAYERS,
                         f"Gated DeltaNet layers {list(qwen35_stand_in.LINEAR_LAYERS)} (and attention layer 3), not "
                         f"layer {layer}", stand_in_file(layer), qwen35_stand_in.SHA256.get(layer),
                         f"the stand-in of layer {layer}", lambda: qwen35_stand_in.linear_layer_bytes(config, layer))
    stored = _stored_dtype(config)
    weights = {name: read(prefix + name, shape, (stored, torch.float32) if name in FLOAT32_ALLOWED else stored)
               for name, shape in linear_attention_shapes(config).items()}
    if verbose:
        print(f"第 {layer} 层的权重：{checkpoint.describe(layers='0-3', generated=True)}")
    return _cast(weights, dtype)


def stored_linear_attention(layer: int, path=None) -> StoredTensors | None:
    """Where the ``linear_attn`` tensors of Gated DeltaNet layer ``layer`` lie, keyed as
    ``submodule_state(load_linear_attention_layer(layer), "linear_attn")`` is, when every file is in
    ``cache_folder()`` (which the grading sandbox may read); else None. Load the layer first: that checks its
    tensors, and makes the stand-in's file when it is not there yet."""
    checkpoint = find_checkpoint(path)
    config = read_config(checkpoint.folder / "config.json")
    prefix = f"{LANGUAGE_MODEL}layers.{layer}."
    keys = [prefix + name for name in linear_attention_shapes(config) if name.startswith("linear_attn.")]
    if checkpoint.synthetic:
        files = dict.fromkeys(keys, stand_in_file(layer))
    else:
        tensors = _TensorFiles(checkpoint.folder)
        files = {key: tensors.file_of(key, checkpoint) for key in keys}
    folder = cache_folder().resolve()
    if not all(file.is_file() and file.resolve().is_relative_to(folder) for file in files.values()):
        return None
    return StoredTensors(tuple((key[len(prefix + "linear_attn."):], str(file.resolve()), key)
                               for key, file in files.items()))


def load_mlp(layer: int, path=None, dtype=None, *, verbose: bool = True) -> dict[str, torch.Tensor]:
    """The MLP of layer ``layer`` (of either type) and the norm before it, keyed relative to the layer.

    Returns (with the shapes of Qwen3.5-0.8B: hidden 1024, ``intermediate_size`` 3584), all bfloat16 as stored
    unless ``dtype`` asks for another:

    - ``mlp.gate_proj.weight``, ``mlp.up_proj.weight [intermediate, hidden]`` = ``[3584, 1024]``;
    - ``mlp.down_proj.weight [hidden, intermediate]`` = ``[1024, 3584]``: the MLP is
      ``down_proj(SiLU(gate_proj(x)) · up_proj(x))``;
    - ``post_attention_layernorm.weight [hidden]`` = ``[1024]`` (zero-centred: scale ``1 + w``).

    Hugging Face's ``Qwen3_5MLP`` loads ``submodule_state(weights, "mlp")`` unchanged.
    """
    checkpoint = find_checkpoint(path)
    config = read_config(checkpoint.folder / "config.json")
    _layer_type(layer, config, checkpoint.folder / "config.json")
    prefix = f"{LANGUAGE_MODEL}layers.{layer}."
    read = _layer_reader(checkpoint, layer, qwen35_stand_in.MLP_LAYERS,
                         f"the MLPs of layers {list(qwen35_stand_in.MLP_LAYERS)}, not layer {layer}'s",
                         stand_in_mlp_file(layer), qwen35_stand_in.MLP_SHA256.get(layer),
                         f"the stand-in MLP of layer {layer}", lambda: qwen35_stand_in.mlp_bytes(config, layer))
    weights = {name: read(prefix + name, shape, _stored_dtype(config)) for name, shape in mlp_shapes(config).items()}
    if verbose:
        print(f"第 {layer} 层 MLP 的权重：{checkpoint.describe(layers='0-3', generated=True)}")
    return _cast(weights, dtype)


def load_layer(layer: int, path=None, dtype=None, *, verbose: bool = True) -> dict[str, torch.Tensor]:
    """The whole decoder layer ``layer``, whatever its type (``load_config().layer_types[layer]``): the weights of
    ``load_attention_layer`` for a softmax-attention layer or of ``load_linear_attention_layer`` for a Gated
    DeltaNet one, with those of ``load_mlp``; so that layers 0-3 can be run in order. The keys are those of Hugging
    Face's ``Qwen3_5DecoderLayer`` (``layer_shapes`` lists them), which loads the dict unchanged; one line says which
    weights were read."""
    checkpoint = find_checkpoint(path)
    config = read_config(checkpoint.folder / "config.json")
    mixer = load_linear_attention_layer if _layer_type(layer, config) == LINEAR_ATTENTION else load_attention_layer
    weights = {**mixer(layer, path, dtype, verbose=False), **load_mlp(layer, path, dtype, verbose=False)}
    if verbose:
        print(f"第 {layer} 层的权重：{checkpoint.describe(layers='0-3', generated=True)}")
    return weights


def load_embedding_rows(token_ids, path=None, dtype=None, *, verbose: bool = True) -> torch.Tensor:
    """Embedding rows ``[n, hidden]`` of ``token_ids`` (a list or 1-D tensor of ``n`` ids), in that order.

    From a real checkpoint only these rows of ``model.language_model.embed_tokens.weight`` are read.
    The stand-in holds the rows of the course's prompt only (今天天气不错，我们去公园), a partial copy the
    rows it was fetched with; other ids raise an error that says so.
    """
    ids = [int(i) for i in torch.as_tensor(token_ids).reshape(-1).tolist()]
    checkpoint = find_checkpoint(path)
    config = read_config(checkpoint.folder / "config.json")
    tensors = _TensorFiles(checkpoint.folder)
    if checkpoint.synthetic or checkpoint.partial:
        rows = _stored_rows(ids, tensors, config, checkpoint)
    else:
        rows = tensors.read_rows(EMBEDDING_KEY, ids, (config.vocab_size, config.hidden_size),
                                 _stored_dtype(config), checkpoint)
    if verbose:
        print(f"词嵌入：{checkpoint.describe()}")
    return rows.to(dtype) if dtype is not None else rows


def _cast(weights: dict[str, torch.Tensor], dtype) -> dict[str, torch.Tensor]:
    return {name: tensor.to(dtype) if dtype is not None else tensor for name, tensor in weights.items()}


def attention_shapes(config) -> dict[str, tuple[int, ...]]:
    """Shapes of a full-attention layer's tensors, keyed relative to the layer."""
    heads, kv_heads, dim, hidden = (config.num_attention_heads, config.num_key_value_heads,
                                    config.head_dim, config.hidden_size)
    return {
        "self_attn.q_proj.weight": (heads * 2 * dim, hidden),
        "self_attn.k_proj.weight": (kv_heads * dim, hidden),
        "self_attn.v_proj.weight": (kv_heads * dim, hidden),
        "self_attn.o_proj.weight": (hidden, heads * dim),
        "self_attn.q_norm.weight": (dim,),
        "self_attn.k_norm.weight": (dim,),
        "input_layernorm.weight": (hidden,),
    }


def linear_attention_shapes(config) -> dict[str, tuple[int, ...]]:
    """Shapes of a Gated DeltaNet layer's tensors (its linear attention and input norm), keyed relative to the
    layer, as transformers' ``Qwen3_5GatedDeltaNet`` makes them."""
    heads, hidden = config.linear_num_value_heads, config.hidden_size
    value_dim = heads * config.linear_value_head_dim
    conv_dim = 2 * config.linear_num_key_heads * config.linear_key_head_dim + value_dim
    return {
        "linear_attn.in_proj_qkv.weight": (conv_dim, hidden),
        "linear_attn.in_proj_z.weight": (value_dim, hidden),
        "linear_attn.in_proj_b.weight": (heads, hidden),
        "linear_attn.in_proj_a.weight": (heads, hidden),
        "linear_attn.conv1d.weight": (conv_dim, 1, config.linear_conv_kernel_dim),
        "linear_attn.dt_bias": (heads,),
        "linear_attn.A_log": (heads,),
        "linear_attn.norm.weight": (config.linear_value_head_dim,),
        "linear_attn.out_proj.weight": (hidden, value_dim),
        "input_layernorm.weight": (hidden,),
    }


def mlp_shapes(config) -> dict[str, tuple[int, ...]]:
    """Shapes of a layer's MLP and post-attention norm, keyed relative to the layer, as transformers'
    ``Qwen3_5DecoderLayer`` makes them."""
    hidden, intermediate = config.hidden_size, config.intermediate_size
    return {
        "mlp.gate_proj.weight": (intermediate, hidden),
        "mlp.up_proj.weight": (intermediate, hidden),
        "mlp.down_proj.weight": (hidden, intermediate),
        "post_attention_layernorm.weight": (hidden,),
    }


def layer_shapes(config, layer: int) -> dict[str, tuple[int, ...]]:
    """Shapes of what the course reads of layer ``layer`` (what ``load_layer`` returns): ``attention_shapes`` or
    ``linear_attention_shapes`` by its type, and ``mlp_shapes``."""
    mixer = linear_attention_shapes if _layer_type(layer, config) == LINEAR_ATTENTION else attention_shapes
    return mixer(config) | mlp_shapes(config)


def submodule_state(weights: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries of ``weights`` under ``prefix`` (e.g. ``"self_attn"``), with the prefix removed."""
    start = prefix.rstrip(".") + "."
    return {key[len(start):]: value for key, value in weights.items() if key.startswith(start)}


# --- finding a checkpoint -------------------------------------------------------------------------

def _checked(folder: Path, origin: str) -> Checkpoint:
    """``folder`` as a checkpoint, or an error that says what is missing. A file inside the folder
    (its ``config.json``, ``model.safetensors`` or index) stands for the folder."""
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise CheckpointError(f"{folder} ({origin}) does not exist; {_HOW_TO_GET_THE_MODEL}")
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} ({origin}) has no config.json, so it is not a model checkpoint; "
                              f"{_HOW_TO_GET_THE_MODEL}")
    if not ((folder / INDEX_FILE).is_file() or (folder / SINGLE_FILE).is_file()):
        raise CheckpointError(f"{folder} ({origin}) has neither {SINGLE_FILE} nor {INDEX_FILE}; the weights "
                              f"are missing or not in safetensors format; {_HOW_TO_GET_THE_MODEL}")
    note = _note(folder)
    return Checkpoint(folder, origin, synthetic=note.startswith(SYNTHETIC_NOTE), partial=note.startswith(PARTIAL_NOTE))


def _note(folder: Path) -> str:
    """The stand-in and a partial copy say what they are in their safetensors metadata; real checkpoints
    have no such note."""
    if not (folder / SINGLE_FILE).is_file():
        return ""
    with safe_open(folder / SINGLE_FILE, framework="pt") as handle:
        return (handle.metadata() or {}).get("note", "")


def hf_cache_dir() -> Path:
    """Where Hugging Face keeps downloaded models, following huggingface_hub's variables."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _from_hf_cache():
    """The cached snapshot of the model: the one ``refs/main`` names, else the newest complete one.
    Incomplete snapshots (a download that stopped, or only the tokenizer fetched) are skipped."""
    model_dir = hf_cache_dir() / ("models--" + REPO_ID.replace("/", "--"))
    snapshots = model_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    main = model_dir / "refs" / "main"
    preferred = snapshots / main.read_text().strip() if main.is_file() else None
    candidates = sorted(snapshots.iterdir(), key=lambda p: (p != preferred, -p.stat().st_mtime))
    for folder in candidates:
        try:
            checkpoint = _checked(folder, "Hugging Face cache")
            _TensorFiles(folder).files()  # every shard the index lists is there
            return checkpoint
        except CheckpointError:
            continue
    return None


def _display(folder: Path) -> str:
    """``folder`` relative to the repository when it is inside it (shorter, same on every machine)."""
    try:
        return str(folder.resolve().relative_to(FIXTURE_DIR.parent.parent))
    except ValueError:
        return str(folder)


# --- reading tensors ------------------------------------------------------------------------------

class _TensorFiles:
    """Which safetensors file holds which key, for a single file or an index of shards."""

    def __init__(self, folder: Path):
        self.folder = folder
        index = folder / INDEX_FILE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, KeyError) as error:
                raise CheckpointError(f"{index} is not a safetensors index ({error!r}); download it again") from None
            self.location = {key: folder / name for key, name in weight_map.items()}
        else:
            with safe_open(folder / SINGLE_FILE, framework="pt") as handle:
                self.location = dict.fromkeys(handle.keys(), folder / SINGLE_FILE)

    def files(self) -> set[Path]:
        """The files the keys live in; an error if one is missing."""
        files = set(self.location.values())
        for file in files:
            if not file.is_file():
                raise CheckpointError(f"{file} is missing, but {self.folder / INDEX_FILE} lists tensors in it; "
                                      "the download is incomplete: download the model again")
        return files

    def file_of(self, key: str, checkpoint: Checkpoint) -> Path:
        if key not in self.location:
            where = self.folder / (INDEX_FILE if (self.folder / INDEX_FILE).is_file() else SINGLE_FILE)
            if checkpoint.synthetic:
                hint = ("the synthetic stand-in holds only layers 0-3 (Gated DeltaNet layers 0-2, attention layer 3, "
                        f"their MLPs) and the prompt's embeddings; for anything else, {_HOW_TO_GET_THE_MODEL}")
            elif checkpoint.partial:
                hint = ("this partial copy holds only the layers it was fetched with; add others with "
                        "`course-weights qwen35 --layers N` (or a range, e.g. 0-3)")
            else:
                hint = f"is this {REPO_ID}? Use its original files; if the download is incomplete, download it again"
            raise CheckpointError(f"{where} has no tensor {key!r}; {hint}")
        file = self.location[key]
        if not file.is_file():
            raise CheckpointError(f"{file} is missing (it should hold {key!r}); the download is incomplete: "
                                  "download the model again")
        return file

    def read(self, key: str, shape, dtype, checkpoint: Checkpoint) -> torch.Tensor:
        """The tensor ``key``, checked against the expected ``shape`` (None: any) and ``dtype`` (or a tuple of
        the dtypes allowed)."""
        file = self.file_of(key, checkpoint)
        with safe_open(file, framework="pt") as handle:
            # safetensors hands back a view of the memory-mapped file; a copy (a few MB) keeps the
            # tensor valid if the file is replaced while it is in use (rewriting the fixture, a new download).
            tensor = handle.get_tensor(key).clone()
        _check(file, key, tuple(tensor.shape), tensor.dtype, shape, dtype)
        return tensor

    def read_rows(self, key: str, rows: list[int], shape, dtype: torch.dtype, checkpoint: Checkpoint) -> torch.Tensor:
        """Rows ``rows`` of the 2-D tensor ``key`` (expected ``shape``), reading only those rows."""
        file = self.file_of(key, checkpoint)
        with safe_open(file, framework="pt") as handle:
            view = handle.get_slice(key)
            _check(file, key, tuple(view.get_shape()), _torch_dtype(view.get_dtype()), shape, dtype)
            for row in rows:
                if not 0 <= row < shape[0]:
                    raise CheckpointError(f"token id {row} is out of range: {key} in {file} has {shape[0]} rows")
            return torch.cat([view[row:row + 1] for row in rows]) if rows else torch.empty(0, shape[1], dtype=dtype)


def _layer_reader(checkpoint: Checkpoint, layer: int, stand_in_layers, holds: str, file: Path, expected: str | None,
                  what: str, make):
    """``read(key, shape, dtypes)`` for one layer's part: from the checkpoint (``_reader``), or, for the stand-in,
    from its file made on first use (``_StandInFile``), which exists for ``stand_in_layers`` only (``holds`` says
    what it holds instead)."""
    if not checkpoint.synthetic:
        return _reader(checkpoint)
    if layer not in stand_in_layers:
        raise CheckpointError(f"the synthetic stand-in holds only {holds}; for other layers, {_HOW_TO_GET_THE_MODEL}")
    return _StandInFile(file, expected, what, make).read


def _reader(checkpoint: Checkpoint):
    """``read(key, shape, dtypes)`` for a real checkpoint or a partial copy."""
    tensors = _TensorFiles(checkpoint.folder)

    def read(key, shape, dtypes):
        return tensors.read(key, shape, dtypes, checkpoint)
    return read


class _StandInFile:
    """One file of the stand-in made on first use (``what`` names it in errors): ``file`` in ``stand_in_folder()``,
    made by ``make()`` (and kept there) when it is not there yet or its SHA-256 is not ``expected``; made anew
    each time where the cache cannot be written."""

    def __init__(self, file: Path, expected: str, what: str, make):
        self.file = file
        try:
            data = file.read_bytes()
        except OSError:  # not made yet, or unreadable: made here
            data = b""
        if qwen35_stand_in.sha256(data) != expected:
            data = make()
            if qwen35_stand_in.sha256(data) != expected:
                raise CheckpointError(
                    f"{what} made here has SHA-256 {qwen35_stand_in.sha256(data)}, not "
                    f"{expected}: the recipe in course/qwen35_stand_in.py or the config.json it reads sizes from "
                    f"({FIXTURE_DIR / 'config.json'}) was changed; restore them (they are the course's files)")
            _keep(file, data)
        self.tensors = load_safetensors(data)

    def read(self, key: str, shape, dtype) -> torch.Tensor:
        """The tensor ``key``, checked as ``_TensorFiles.read`` checks it."""
        tensor = self.tensors[key]
        _check(self.file, key, tuple(tensor.shape), tensor.dtype, shape, dtype)
        return tensor


def _keep(file: Path, data: bytes) -> None:
    """``data`` written to ``file`` whole or not at all (another process may be making it too); nothing when the
    cache cannot be written, so that a read-only home still runs the course (making the layer each time)."""
    partial = file.with_name(f".writing-{uuid.uuid4().hex}-{file.name}")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(data)
        os.replace(partial, file)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()


def _stored_rows(ids: list[int], tensors: _TensorFiles, config: TextConfig, checkpoint: Checkpoint) -> torch.Tensor:
    """Rows from the small table of the stand-in or of a partial copy: ``fixture.embed_tokens.ids [m]`` and
    ``.rows [m, hidden]``."""
    stored_ids = tensors.read(FIXTURE_IDS_KEY, None, torch.int64, checkpoint).tolist()
    rows = tensors.read(FIXTURE_ROWS_KEY, (len(stored_ids), config.hidden_size), _stored_dtype(config), checkpoint)
    missing = sorted(set(ids) - set(stored_ids))
    if missing and checkpoint.partial:
        raise CheckpointError(f"token ids {missing} are not in {checkpoint.folder / SINGLE_FILE}: this partial copy "
                              f"holds the embeddings of {stored_ids} only; add a text's tokens with "
                              "`course-weights qwen35 --text TEXT`")
    if missing:
        raise CheckpointError(f"token ids {missing} are not in {checkpoint.folder / SINGLE_FILE}: the synthetic "
                              f"stand-in stores only the embeddings of {stored_ids} (今天天气不错，我们去公园); "
                              f"for other text, {_HOW_TO_GET_THE_MODEL}")
    position = {token: i for i, token in enumerate(stored_ids)}
    return rows[[position[token] for token in ids]]


def _check(file: Path, key: str, shape, dtype, expected_shape, expected_dtype) -> None:
    """``expected_dtype``: what config.json says, or a tuple of it and float32 for ``FLOAT32_ALLOWED``."""
    if expected_shape is not None and shape != tuple(expected_shape):
        raise CheckpointError(f"{key} in {file} has shape {list(shape)}, expected {list(expected_shape)} for "
                              f"{REPO_ID}; this checkpoint is another model (or its config.json does not "
                              "match its weights): use Qwen3.5-0.8B")
    said, *also = expected_dtype if isinstance(expected_dtype, tuple) else (expected_dtype,)
    if dtype != said and dtype not in also:
        expected = f"{said} as config.json says" + "".join(f", or {d} as the published checkpoint keeps this tensor"
                                                            for d in also)
        raise CheckpointError(f"{key} in {file} is {dtype}, expected {expected}; the checkpoint was converted: use "
                              f"the original {REPO_ID} files (to get another dtype, pass dtype= to the loader, which "
                              "casts after reading)")


def _layer_type(layer: int, config: TextConfig, where="config.json") -> str:
    """``config``'s type of layer ``layer`` (read from ``where``), which must exist and be one the course knows."""
    if not 0 <= layer < config.num_hidden_layers:
        raise CheckpointError(f"layer {layer} does not exist: {where} has {config.num_hidden_layers} layers "
                              f"(0 to {config.num_hidden_layers - 1})")
    kind = config.layer_types[layer]
    if kind not in (FULL_ATTENTION, LINEAR_ATTENTION):
        raise CheckpointError(f"layer {layer} is a {kind!r} layer in {where}; Qwen3.5's layers are "
                              f"{FULL_ATTENTION!r} or {LINEAR_ATTENTION!r}: is this Qwen3.5-0.8B?")
    return kind


def _check_layer(layer: int, config: TextConfig, checkpoint: Checkpoint, kind: str) -> None:
    """Layer ``layer`` exists and is of type ``kind``, or an error that names the loader for its type."""
    actual = _layer_type(layer, config, checkpoint.folder / "config.json")
    if actual == kind:
        return
    if kind == FULL_ATTENTION:
        raise CheckpointError(f"layer {layer} is a {actual} (Gated DeltaNet) layer; the softmax-attention layers "
                              f"are {list(config.full_attention_layers)} (load_linear_attention_layer reads the others)")
    raise CheckpointError(f"layer {layer} is a {actual} (softmax-attention) layer; the Gated DeltaNet layers are "
                          f"{list(config.linear_attention_layers)} (load_attention_layer reads layer {layer})")


def _stored_dtype(config: TextConfig) -> torch.dtype:
    return _torch_dtype(config.dtype)


# Names safetensors and config.json use for dtypes.
_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
           "I64": torch.int64, "I32": torch.int32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "float32": torch.float32}


def _torch_dtype(name: str) -> torch.dtype:
    # An unknown name stays a string: it never equals the expected dtype, so _check reports it as it is.
    return _DTYPES.get(name, name)
