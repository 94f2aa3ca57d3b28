#!/usr/bin/env python3
"""Asks XLA's own parser (jaxlib) which corpus modules it accepts.

Usage: corpus_oracle.py CORPUS_DIR OUT_REJECTS [OUT_VERIFY_REJECTS]

Splits every .hlo file on lines that are exactly `// -----`, drops chunks that hold nothing but comments, and
writes `relative/path.hlo:INDEX` (0-based among the kept chunks) for each module that XLA's
parser refuses. Needs a Python with jax (see ../shared/ORACLE.md); jax is never a dependency of
the product, this only makes the expectations the corpus test reads.
"""
import os
import re
import sys

from jaxlib import _hlo


def modules(text):
    """The modules of a corpus file: its chunks between `// -----` lines that hold more than comments."""
    chunks = re.split(r"(?m)^// -----[ \t]*$", text)
    return [c for c in chunks if any(l.strip() and not l.strip().startswith("//") for l in c.splitlines())]


def corpus_modules(corpus):
    """Every module of the corpus as (`relative/path.hlo`, INDEX among its file's modules, text)."""
    for root, _, files in os.walk(corpus):
        for f in sorted(files):
            if not f.endswith(".hlo"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, corpus)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            for i, m in enumerate(modules(text)):
                yield rel, i, m


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    rejects, total = [], 0
    for rel, i, m in corpus_modules(corpus):
        total += 1
        try:
            _hlo.hlo_module_from_text(m)
        except Exception as e:  # XLA raises its status as a Python exception
            first = str(e).strip().splitlines()[0] if str(e).strip() else "error"
            rejects.append(f"{rel}:{i}\t{first[:200]}")
    rejects.sort()
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(f"# {total} modules; XLA's parser rejects {len(rejects)}. Made by scripts/oracles/corpus_oracle.py.\n")
        for r in rejects:
            fh.write(r + "\n")
    print(f"{total} modules, {len(rejects)} rejected")


if __name__ == "__main__":
    main()
