"""Cleaning a message is linear: what a record does to one text, from 1 kB to 50 MB.

For each size and shape, side by side (printed, never asserted): the time to clean the
machine's paths from the whole text (``clean_paths``), to fold it into a signature's
message (``normalise_message``), and to keep what a record keeps (``shorten``, then
clean), with the time per megabyte: linear cleaning keeps that column flat.

    python benchmarks/bench_signature.py [--json out.json] [--max-mb 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ftmatrix.cell.records import shorten  # noqa: E402 -- after the path above
from ftmatrix.cell.signature import clean_paths, normalise_message  # noqa: E402

# Shapes of real messages: one run with no space (a formatted tensor), many paths (a
# traceback of frames), and slashes everywhere (a URL-heavy log).
SHAPES = {
    "no space": lambda n: "E" * n,
    "traceback": lambda n: (
        'File "/home/runner/.nox/m/lib/python3.11/site-packages/trl/x.py", line 1, in f\n'
        * (n // 80 + 1)
    )[:n],
    "slashes": lambda n: ("=/" * (n // 2 + 1))[:n],
}


def timed(function, text: str) -> float:
    started = time.perf_counter()
    function(text)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--max-mb", type=float, default=50)
    args = parser.parse_args()
    sizes = [1_000, 10_000, 100_000, 1_000_000, 10_000_000, 50_000_000]
    rows = []
    print(
        f"{'shape':<10} {'size':>11} {'clean_paths':>12} {'normalise':>10}"
        f" {'record':>8} {'s/MB':>7}"
    )
    for shape, make in SHAPES.items():
        for size in (s for s in sizes if s <= args.max_mb * 1_000_000):
            text = make(size)
            clean = timed(clean_paths, text)
            fold = timed(normalise_message, text)
            kept = timed(lambda t: clean_paths(shorten(t)), text)
            per_mb = clean / (size / 1_000_000)
            rows.append(
                {
                    "shape": shape,
                    "bytes": size,
                    "clean_paths_s": clean,
                    "normalise_s": fold,
                    "record_s": kept,
                    "clean_s_per_mb": per_mb,
                }
            )
            print(
                f"{shape:<10} {size:>11,} {clean:>12.4f} {fold:>10.4f} {kept:>8.4f} {per_mb:>7.3f}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
