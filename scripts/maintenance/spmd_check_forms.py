#!/usr/bin/env python3
"""Make the sharding CHECK lines of testdata/spmd*/ accept both spellings of a tile assignment.

A tile assignment can be printed as an explicit device list (`devices=[2,2]0,2,1,3`) or, when
the list is a transposed iota, in XLA's compact form (`devices=[2,2]<=[2,2]T(1,0)`). Which one
a pass prints depends on how it built the sharding, not on what the sharding is, so a test should
accept both. This script rewrites every `sharding={...}` in a `// CHECK` line whose device lists
are still plain (written as in XLA's tests) into FileCheck regex alternations:

    sharding={devices=[2,2]0,2,1,3}  ->  sharding={devices=[2,2]{{0,2,1,3|<=\\[2,2\\]T\\(1,0\\)}}}

Tuple shardings get their opening `{{` escaped (FileCheck would read it as a regex). Lines that
already hold a `{{` after `sharding=` are left alone, so the script can run again safely.

    python3 scripts/maintenance/spmd_check_forms.py testdata/spmd testdata/spmd-pending
"""

import itertools
import re
import sys
from pathlib import Path


def factorizations(n):
    """Ordered factorizations of n into factors >= 2."""
    if n == 1:
        yield []
        return
    for f in range(2, n + 1):
        if n % f == 0:
            for rest in factorizations(n // f):
                yield [f] + rest


def iota_transposed(reshape, perm):
    n = 1
    for d in reshape:
        n *= d
    # strides of the iota array of shape `reshape`
    strides = [1] * len(reshape)
    for i in range(len(reshape) - 2, -1, -1):
        strides[i] = strides[i + 1] * reshape[i + 1]
    tdims = [reshape[p] for p in perm]
    tstrides = [strides[p] for p in perm]
    out = []
    for idx in itertools.product(*[range(d) for d in tdims]):
        out.append(sum(i * s for i, s in zip(idx, tstrides)))
    return out


def iota_form(devices):
    """XLA's compact `<=[..]T(..)` spelling of an explicit device list, or None."""
    n = len(devices)
    if devices == list(range(n)):
        return "<=[%d]" % n
    if sorted(devices) != list(range(n)):
        return None
    best = None
    for fac in factorizations(n):
        if best is not None and len(fac) >= len(best[0]):
            continue
        for perm in itertools.permutations(range(len(fac))):
            if list(perm) == sorted(perm):
                continue
            if iota_transposed(fac, perm) == devices:
                best = (fac, perm)
                break
    if best is None:
        return None
    fac, perm = best
    return "<=[%s]T(%s)" % (",".join(map(str, fac)), ",".join(map(str, perm)))


def explicit_form(iota):
    m = re.fullmatch(r"<=\[([\d,]+)\](?:T\(([\d,]+)\))?", iota)
    reshape = [int(x) for x in m.group(1).split(",")]
    perm = [int(x) for x in m.group(2).split(",")] if m.group(2) else list(range(len(reshape)))
    return ",".join(map(str, iota_transposed(reshape, perm)))


TILED = re.compile(r"devices=\[([\d,]+)\](<=\[[\d,]+\](?:T\([\d,]+\))?|[\d,]*\d)")


def alternation(m):
    dims, devs = m.group(1), m.group(2)
    if devs.startswith("<="):
        explicit, iota = explicit_form(devs), devs
    else:
        explicit, iota = devs, iota_form([int(x) for x in devs.split(",")])
    if iota is None:
        return "devices=[%s]%s" % (dims, explicit)
    return "devices=[%s]{{%s|%s}}" % (dims, explicit, re.escape(iota))


def rewrite_sharding(text):
    """`text` is one balanced `{...}` sharding."""
    body = TILED.sub(alternation, text)
    if body.startswith("{{") and not body.startswith("{{["):
        body = "{{[{]}}" + body[1:]
    return body


def balanced(s, start):
    depth = 0
    for i in range(start, len(s)):
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced sharding in: " + s)


def rewrite_line(line):
    if not line.lstrip().startswith("// CHECK"):
        return line
    out, pos = [], 0
    while True:
        k = line.find("sharding={", pos)
        if k < 0:
            out.append(line[pos:])
            return "".join(out)
        start = k + len("sharding=")
        if line.startswith("{{[", start) or (
            line.startswith("{{", start) and "|" in line[start:]
        ):
            out.append(line[pos:])  # already rewritten
            return "".join(out)
        try:
            end = balanced(line, start)
        except ValueError:
            out.append(line[pos:])  # a partial pattern (e.g. CHECK-NOT: sharding={devices)
            return "".join(out)
        out.append(line[pos:start])
        out.append(rewrite_sharding(line[start:end]))
        pos = end


def selftest():
    assert iota_form([0, 1, 2, 3]) == "<=[4]"
    assert iota_form([0, 2, 1, 3]) == "<=[2,2]T(1,0)"
    assert iota_form([0, 4, 1, 5, 2, 6, 3, 7]) == "<=[2,4]T(1,0)"
    assert iota_form([0, 2, 4, 6, 1, 3, 5, 7]) == "<=[4,2]T(1,0)"
    assert iota_form([1, 0]) is None
    assert explicit_form("<=[2,2]T(1,0)") == "0,2,1,3"
    line = "// CHECK: %t = {{.*}}sharding={{devices=[2]0,1}, {replicated}}"
    new = rewrite_line(line)
    assert new == (
        "// CHECK: %t = {{.*}}sharding={{[{]}}{devices=[2]{{0,1|<=\\[2\\]}}}, {replicated}}"
    ), new
    assert rewrite_line(new) == new


def main(dirs):
    selftest()
    for d in dirs:
        for p in sorted(Path(d).glob("*.hlo")):
            old = p.read_text()
            new = "".join(rewrite_line(l) for l in old.splitlines(keepends=True))
            if new != old:
                p.write_text(new)
                print("rewrote", p)


if __name__ == "__main__":
    main(sys.argv[1:])
