"""Wall time of the project's own test tiers, as the README runs them: the inner loop (`pytest tests/engine
tests/sandbox tests/checks`), the default tier (`pytest`) and, with --full, every test (`pytest -m "" --dist
loadgroup`, what .ci/run runs after its install). Each on `-n auto` workers; on a machine doing nothing else, or the
figures are the other work's too. With --slowest N, also the N test files that took longest in each tier (summed
test time, from pytest's junit report).

Run: python benchmarks/suite_tiers.py [--full] [--slowest N]
"""
import argparse
import collections
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TIERS = {
    "inner loop": ["tests/engine", "tests/sandbox", "tests/checks"],
    "default tier": [],
    "every test": ["-m", "", "--dist", "loadgroup"],
}


def run(name: str, args: list[str], slowest: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "junit.xml"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "auto", *args, f"--junitxml={report}"],
                              cwd=REPO, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
        print(f"{name}: {seconds:.0f} s wall ({summary})")
        if slowest and report.is_file():
            by_file = collections.Counter()
            for case in ET.parse(report).iter("testcase"):
                by_file[case.get("classname", "").split("@")[0]] += float(case.get("time") or 0)
            print(f"    {sum(by_file.values()):.0f} test-seconds in all; the most:")
            for module, spent in by_file.most_common(slowest):
                print(f"    {spent:7.1f} s  {module}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="also every test (about twenty minutes on two cores)")
    parser.add_argument("--slowest", type=int, default=0, help="list the test files that took longest")
    args = parser.parse_args()
    for name, tier in TIERS.items():
        if name != "every test" or args.full:
            run(name, tier, args.slowest)


if __name__ == "__main__":
    main()
