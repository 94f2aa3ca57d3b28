#!/usr/bin/env python3
"""Rewrites the table of testdata/spmd-partitioning/README.md from the files themselves.

Each filetest's first comment after RUN (and after `// NOEXEC:`, where there is one) names
the XLA test it follows (`// XLA FooBar: ...`, or
`// XLA FooBar-like: ...` for a variant in our own words). Everything in the README above the
table is kept; the table and the count line after it are replaced.

    python3 scripts/maintenance/spmd_testdata_index.py
"""
import glob
import os
import re

DIR = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "spmd-partitioning")
NAME = re.compile(r"// XLA:? ([A-Za-z0-9_/]+(?:-like)?(?: \([^)]*\))?)")
TABLE = "| XLA test | file |"


def main():
    files = sorted(glob.glob(os.path.join(DIR, "*.hlo")))
    rows = []
    for path in files:
        with open(path) as f:
            lines = f.read().split("\n")
        # The name is on the first comment line after RUN, past a `// NOEXEC:` line if any.
        m = next(
            (NAME.match(l) for l in lines[1:4] if l.startswith("// XLA")),
            None,
        )
        if m:
            rows.append((m.group(1), os.path.basename(path)))
    rows.sort(key=lambda r: (r[0].lower(), r[1]))
    named = [r for r in rows if "-like" not in r[0]]
    readme = os.path.join(DIR, "README.md")
    with open(readme) as f:
        text = f.read()
    head = text.split(TABLE)[0]
    head = re.sub(
        r"pass \(\d+ files\)\. \d+ of them follow",
        f"pass ({len(files)} files). {len(rows)} of them follow",
        head,
    )
    table = TABLE + "\n|---|---|\n" + "".join(f"| {t} | {f} |\n" for t, f in rows)
    tail = (
        f"\n{len(named)} files follow a named test exactly "
        f"({len({t for t, _ in named})} distinct XLA tests); "
        f"{len(rows) - len(named)} are \"-like\" variants.\n"
    )
    with open(readme, "w") as f:
        f.write(head + table + tail)


if __name__ == "__main__":
    main()
