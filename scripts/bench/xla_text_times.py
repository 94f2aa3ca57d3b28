#!/usr/bin/env python3
"""Times XLA's own HLO text parser and printer (jaxlib) on corpus files, for docs/BENCHMARKS.md.

    VENV/bin/python scripts/bench/xla_text_times.py ../shared/corpus/xla-hlo FILE...

Prints, per file: bytes, median parse time and median print time over 5 runs.
"""
import os
import statistics
import sys
import time

from jaxlib import _hlo


def median_times(first, second, runs=5):
    """Runs `first()`, then `second` on its result, `runs` times: the median seconds of each, and
    the last result of `first`."""
    a, b, x = [], [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        x = first()
        t1 = time.perf_counter()
        second(x)
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a), statistics.median(b), x


def main():
    corpus = sys.argv[1]
    for rel in sys.argv[2:]:
        with open(os.path.join(corpus, rel), encoding="utf-8") as f:
            text = f.read()
        parse, printing, _ = median_times(lambda: _hlo.hlo_module_from_text(text), lambda m: m.to_string())
        print(f"{rel}\t{len(text)} bytes\tparse {parse*1e3:.1f} ms\tprint {printing*1e3:.1f} ms")


if __name__ == "__main__":
    main()
