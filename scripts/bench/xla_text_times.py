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


def main():
    corpus = sys.argv[1]
    for rel in sys.argv[2:]:
        with open(os.path.join(corpus, rel), encoding="utf-8") as f:
            text = f.read()
        parse, printing = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            m = _hlo.hlo_module_from_text(text)
            t1 = time.perf_counter()
            m.to_string()
            t2 = time.perf_counter()
            parse.append(t1 - t0)
            printing.append(t2 - t1)
        print(f"{rel}\t{len(text)} bytes\tparse {statistics.median(parse)*1e3:.1f} ms"
              f"\tprint {statistics.median(printing)*1e3:.1f} ms")


if __name__ == "__main__":
    main()
