"""Attention heatmaps labelled with Chinese tokens, and data-flow diagrams of a layer.

Matplotlib's bundled font (DejaVu Sans) has no CJK glyphs, so Chinese labels would show up as
empty boxes. Before drawing, this module looks for a CJK font: one matplotlib already knows (a
system font), the Noto Sans CJK SC file shipped by the ``mplfonts`` pip package, or a CJK font
file installed on the system after matplotlib built its font cache. If none is found it still
plots, and warns once, in Chinese, how to install one.
"""
import functools
import importlib.util
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib import font_manager

# Family names of common CJK fonts, in order of preference.
_CJK_FAMILIES = (
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "PingFang SC",
    "Microsoft YaHei",
    "SimHei",
    "Heiti SC",
    "Arial Unicode MS",
)
# Font files inside pip packages: (package, path relative to the package folder).
_PACKAGED_FONTS = (("mplfonts", "fonts/NotoSansCJKsc-Regular.otf"),)
# Lower-case file-name fragments of CJK fonts, to spot files matplotlib's cache does not list yet.
_CJK_FILE_HINTS = ("notosanscjk", "notosanssc", "sourcehansans", "wqy", "simhei", "msyh", "pingfang")

_NO_FONT_MESSAGE = (
    "没有找到中文字体，图里的中文会显示成方框。安装一个即可：`pip install mplfonts`"
    "（或在 Debian/Ubuntu 上 `apt-get install fonts-noto-cjk`），然后重启内核。"
)

# Above this many columns the numbers no longer fit in the cells.
_MAX_ANNOTATED_COLUMNS = 12


def attention_heatmap(weights, query_tokens, key_tokens=None, *, ax=None, title=None, annotate=None):
    """Draw attention weights as a heatmap: one row per query token, one column per key token.

    ``weights``: a ``[Tq, Tk]`` tensor of any float dtype; leading dimensions of size 1 are
    dropped, so ``[1, 1, Tq, Tk]`` works too. ``query_tokens`` label the rows and ``key_tokens``
    the columns (default: the same tokens, as in self-attention). The colour scale is fixed to
    [0, 1] so that plots can be compared. Each cell shows its weight when ``annotate`` is True,
    by default when there are at most 12 columns; an exact zero is written ``0`` so that masked
    cells stand out from small weights (``0.00``). Draws on ``ax`` if given, else on a new figure.
    Returns the Axes.
    """
    _use_chinese_font()
    matrix = torch.as_tensor(weights).detach().to("cpu", torch.float32)
    while matrix.dim() > 2 and matrix.shape[0] == 1:
        matrix = matrix[0]
    key_tokens = query_tokens if key_tokens is None else key_tokens
    if matrix.dim() != 2:
        raise ValueError(
            f"需要二维的权重矩阵 [Tq, Tk]，得到的形状是 {tuple(matrix.shape)}；"
            "请先选出一个样本和一个头，例如 weights[0, 0]。"
        )
    n_queries, n_keys = matrix.shape
    if (len(query_tokens), len(key_tokens)) != (n_queries, n_keys):
        raise ValueError(
            f"权重矩阵是 {n_queries}×{n_keys}，但给了 {len(query_tokens)} 个 query 标签和 "
            f"{len(key_tokens)} 个 key 标签。"
        )

    if ax is None:
        _, ax = plt.subplots(figsize=(1.5 + 0.65 * n_keys, 1.0 + 0.6 * n_queries))
    image = ax.imshow(matrix.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(n_keys), labels=key_tokens)
    ax.set_yticks(range(n_queries), labels=query_tokens)
    ax.set_xlabel("key（被看的 token）")
    ax.set_ylabel("query（提问的 token）")
    if title:
        ax.set_title(title)

    if annotate is None:
        annotate = n_keys <= _MAX_ANNOTATED_COLUMNS
    if annotate:
        for i in range(n_queries):
            for j in range(n_keys):
                value = matrix[i, j].item()
                label = "0" if value == 0 else f"{value:.2f}"
                color = "white" if value > 0.6 else "black"  # stay readable on dark cells
                ax.text(j, i, label, ha="center", va="center", fontsize=8, color=color)
    return ax


def flow_diagram(boxes: dict, arrows: list, *, title=None, size=(11, 6), ax=None):
    """Draw a layer's data flow: labelled boxes joined by arrows.

    ``boxes``: name -> ``(x, y, text)`` or ``(x, y, text, colour)``, in data coordinates (the axes fit
    the boxes). ``arrows``: ``(from, to)``, ``(from, to, label)`` or ``(from, to, label, route)`` between
    box names; ``route`` is a dict with an optional ``"connection"`` (a matplotlib connection style such as
    ``"angle,angleA=-90,angleB=0"``, to lead an arrow around a box) and an optional ``"label_at"`` (x, y)
    (default: halfway between the two box centres).

    Every arrow is cut where it meets the two boxes, so its head sits on the target's edge whatever the box's
    size. Returns the Axes.
    """
    _use_chinese_font()
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    _draw_arrows(ax, boxes, arrows, _draw_boxes(ax, boxes))
    xs, ys = [b[0] for b in boxes.values()], [b[1] for b in boxes.values()]
    ax.set_xlim(min(xs) - 1.2, max(xs) + 1.2)
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax


def _draw_boxes(ax, boxes: dict) -> dict:
    """Draw each box as text in a rounded frame; returns name -> Text artist."""
    return {name: ax.text(x, y, text, ha="center", va="center", fontsize=9.5, zorder=3,
                          bbox={"boxstyle": "round,pad=0.45", "fc": colour[0] if colour else "#dbe8f6",
                                "ec": "#4c72b0"})
            for name, (x, y, text, *colour) in boxes.items()}


def _draw_arrows(ax, boxes: dict, arrows: list, drawn: dict) -> None:
    """Arrows between box centres, cut at the frames of the ``drawn`` boxes."""
    for start, end, *extra in arrows:
        label, route = (extra + [None])[0], (extra[1:] + [{}])[0]
        (x0, y0), (x1, y1) = boxes[start][:2], boxes[end][:2]
        # The frames are placed when their text is drawn; the boxes were added first, so they are drawn first.
        style = {"arrowstyle": "-|>", "color": "#555555", "lw": 1.3, "shrinkA": 1, "shrinkB": 1, "mutation_scale": 14,
                 "patchA": drawn[start].get_bbox_patch(), "patchB": drawn[end].get_bbox_patch()}
        if "connection" in route:
            style["connectionstyle"] = route["connection"]
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=style)
        if label:
            lx, ly = route.get("label_at", ((x0 + x1) / 2, (y0 + y1) / 2))
            ax.text(lx, ly, label, fontsize=8.5, color="#333333", ha="center", va="center",
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9})


def use_chinese_font() -> None:
    """Let every figure drawn from now on show Chinese text (titles, axis labels, legends, ticks).

    ``attention_heatmap`` does this by itself; call it before drawing other figures with Chinese labels.
    Warns once, in Chinese, when no CJK font can be found.
    """
    _use_chinese_font()


def _use_chinese_font() -> None:
    """Add a CJK font to matplotlib's fallback chain (idempotent; warns once if there is none)."""
    family = _find_cjk_family()
    if family is None:
        return
    families = list(plt.rcParams["font.family"])
    if family not in families:
        # Appended, not prepended: Latin text keeps the default font and only the glyphs the
        # default lacks (the Chinese ones) fall back to the CJK font.
        plt.rcParams["font.family"] = families + [family]


@functools.cache
def _find_cjk_family() -> str | None:
    """Name of an available CJK font family, registering its file with matplotlib if needed."""
    known = {font.name for font in font_manager.fontManager.ttflist}
    for family in _CJK_FAMILIES:
        if family in known:
            return family
    for path in _packaged_font_files() + _unregistered_system_font_files():
        try:
            font_manager.fontManager.addfont(str(path))
            return font_manager.FontProperties(fname=str(path)).get_name()
        except (OSError, RuntimeError):  # unreadable or unsupported file: try the next one
            continue
    warnings.warn(_NO_FONT_MESSAGE, stacklevel=4)  # point at the caller of attention_heatmap
    return None


def _packaged_font_files() -> list[Path]:
    """CJK font files shipped inside installed pip packages (found without importing them)."""
    found = []
    for package, relative in _PACKAGED_FONTS:
        spec = importlib.util.find_spec(package)
        folders = spec.submodule_search_locations if spec and spec.submodule_search_locations else []
        found += [Path(folder) / relative for folder in folders if (Path(folder) / relative).is_file()]
    return found


def _unregistered_system_font_files() -> list[Path]:
    """CJK font files on the system, e.g. installed after matplotlib cached its font list."""
    paths = [Path(p) for p in font_manager.findSystemFonts()]
    cjk = [p for p in paths if any(hint in p.name.lower() for hint in _CJK_FILE_HINTS)]
    # Regular weights first, so labels are not drawn in the bold or light face of a family.
    return sorted(cjk, key=lambda p: ("regular" not in p.name.lower(), p.name))
