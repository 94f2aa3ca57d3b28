#!/usr/bin/env python3
"""Times XLA's own HloModuleProto serialization and deserialization (jaxlib) on corpus files,
for docs/BENCHMARKS.md (the counterpart of `cargo bench -p tessera-hlo --bench proto`).

    VENV/bin/python scripts/bench/xla_proto_times.py ../shared/corpus/xla-hlo FILE...

Prints, per file: the proto's size, median serialize and median deserialize time over 5 runs.
"""
import os
import sys

from jaxlib import _hlo

from xla_text_times import median_times


def main():
    corpus = sys.argv[1]
    for rel in sys.argv[2:]:
        with open(os.path.join(corpus, rel), encoding="utf-8") as f:
            m = _hlo.hlo_module_from_text(f.read())
        ser, de, data = median_times(m.as_serialized_hlo_module_proto,
                                     _hlo.HloModule.from_serialized_hlo_module_proto)
        print(f"{rel}\t{len(data)} bytes\tserialize {ser*1e3:.1f} ms\tdeserialize {de*1e3:.1f} ms")


if __name__ == "__main__":
    main()
