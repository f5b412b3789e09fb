"""Time and peak memory of reading layer 3 from a full-size Qwen3.5-0.8B checkpoint, against loading
the whole file.

Writes (in a temporary folder) a synthetic checkpoint of the real size, about 1.7 GB, with the real
key layout: all 24 language-model layers (Gated DeltaNet and full attention), MLPs, norms, the
embedding table, the vision tower and the multi-token-prediction head, in one
``model.safetensors-00001-of-00001.safetensors`` listed in ``model.safetensors.index.json``, as the
model is published. The values are zeros: only bytes and layout matter here.

Each measurement runs in a fresh Python process: the time of the call alone, and its peak resident
memory above what the process held before the call (Linux: VmHWM reset through /proc/self/clear_refs).
"cold" first drops the file from the page cache (posix_fadvise), as after a reboot; "warm" reads it
from memory, as on a second run.

Goal for ``load_attention_layer(3)``: under 0.5 s, and under 100 MB above the layer's own bytes.

Run: python benchmarks/load_layer3.py [--repeats N] [--keep DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.checkpoints import checkpoint_layout, write_full_size  # noqa: E402

SHARD = "model.safetensors-00001-of-00001.safetensors"
GOAL_SECONDS = 0.5
GOAL_EXTRA_BYTES = 100 * 2**20
PROMPT_IDS = [97375, 101618, 98869, 3709, 116450, 99192]

# Run in the child process: read what is asked, report seconds and peak bytes above the start.
CHILD = r"""
import json, resource, sys, time
import torch
from safetensors.torch import load_file
from course.qwen35_weights import load_attention_layer, load_embedding_rows

what, folder, shard, ids = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

before = status("VmRSS")
try:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset VmHWM, the peak, to the current RSS
    peak_field = "VmHWM"
except OSError:
    peak_field = None  # the peak then includes the imports: an upper bound
start = time.perf_counter()
if what == "layer":
    result = load_attention_layer(3, folder, verbose=False)
elif what == "embeddings":
    result = {"rows": load_embedding_rows(ids, folder, verbose=False)}
else:
    result = load_file(shard)
seconds = time.perf_counter() - start
# safetensors may return views of the memory-mapped file, paged in only when read: read every byte,
# as using the weights would, so that time and memory include it.
for tensor in result.values():
    tensor.sum()
touched = time.perf_counter() - start
peak = status(peak_field) if peak_field else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
tensor_bytes = sum(t.numel() * t.element_size() for t in result.values())
print(json.dumps({"seconds": seconds, "touched": touched, "extra": peak - before, "tensor_bytes": tensor_bytes,
                  "exact_peak": bool(peak_field)}))
"""


def write_checkpoint(folder: Path) -> int:
    """The full-size checkpoint in ``folder`` (zeros, one shard as published); returns its size in bytes."""
    (shard,) = write_full_size(folder, shards=1)
    return shard.stat().st_size


def drop_from_page_cache(file: Path) -> None:
    with open(file, "rb") as handle:
        os.fsync(handle.fileno())
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def measure(what: str, folder: Path, cold: bool) -> dict:
    if cold:
        drop_from_page_cache(folder / SHARD)
    done = subprocess.run([sys.executable, "-c", CHILD, what, str(folder), str(folder / SHARD), json.dumps(PROMPT_IDS)],
                          cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"measuring {what} failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per measurement; the median time and the largest peak are shown")
    parser.add_argument("--keep", type=Path, help="write the checkpoint here and keep it (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        size = write_checkpoint(folder)
        print(f"checkpoint: {size / 1e9:.2f} GB, {len(checkpoint_layout(folder / 'config.json'))} tensors, in {folder}")
        print(f"{'what':<42}{'cache':<6}{'call':>9}{'+ read all':>12}{'peak RSS above start':>23}{'tensors':>12}")
        results = {}
        for what, label in (("layer", "load_attention_layer(3)"), ("embeddings", "load_embedding_rows(6 prompt ids)"),
                            ("file", "safetensors.torch.load_file(whole file)")):
            for cold in (True, False):
                runs = [measure(what, folder, cold) for _ in range(args.repeats)]
                seconds = statistics.median(r["seconds"] for r in runs)
                touched = statistics.median(r["touched"] for r in runs)
                extra, tensor_bytes = max(r["extra"] for r in runs), runs[0]["tensor_bytes"]
                results[what, cold] = touched, extra, tensor_bytes
                print(f"{label:<42}{'cold' if cold else 'warm':<6}{seconds:>8.3f}s{touched:>11.3f}s"
                      f"{extra / 2**20:>20.1f} MB{tensor_bytes / 2**20:>9.1f} MB")
        if not all(r["exact_peak"] for r in runs):
            print("(this system does not allow resetting the peak: peaks include the imports)")
    print(f"\ngoal for load_attention_layer(3): under {GOAL_SECONDS} s and under {GOAL_EXTRA_BYTES / 2**20:.0f} MB "
          "above the layer's own bytes")
    for cold in (True, False):
        seconds, extra, tensor_bytes = results["layer", cold]
        over = extra - tensor_bytes
        met = seconds < GOAL_SECONDS and over < GOAL_EXTRA_BYTES
        print(f"  {'cold' if cold else 'warm'}: {seconds:.3f} s, {over / 2**20:.1f} MB above the layer's "
              f"{tensor_bytes / 2**20:.1f} MB -> {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
