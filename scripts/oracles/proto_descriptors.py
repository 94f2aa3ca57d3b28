#!/usr/bin/env python3
"""Prints the HLO protobuf schemas compiled into an XLA binary, as proto-like text.

protobuf's C++ code embeds each .proto file's serialized FileDescriptorProto in the library.
This finds the ones of xla/service/hlo.proto, xla/xla_data.proto and xla/xla.proto in jaxlib
(or any other XLA build) and prints their messages, fields, numbers and types: the facts
crates/hlo/src/proto/messages.rs must agree with, for exactly the XLA we test against.

  python3 scripts/oracles/proto_descriptors.py /work/oracle/venv/lib/python3.12/site-packages/jaxlib/libjax_common.so
No dependencies (plain protobuf wire-format reading).
"""
import re
import sys

FILES = ["xla/service/hlo.proto", "xla/xla_data.proto", "xla/xla.proto"]
TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
         7: "fixed32", 8: "bool", 9: "string", 10: "group", 11: "message", 12: "bytes",
         13: "uint32", 14: "enum", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}


def varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def fields(b):
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        f, t = k >> 3, k & 7
        if t == 0:
            v, i = varint(b, i)
        elif t == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif t == 1:
            v, i = b[i:i + 8], i + 8
        elif t == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {t}")
        out.append((f, v))
    return out


def descriptor_at(data, start):
    """The FileDescriptorProto starting at `start`: fields up to the last plausible one."""
    i = good = start
    try:
        while True:
            k, j = varint(data, i)
            f, t = k >> 3, k & 7
            if not 1 <= f <= 14 or t not in (0, 2):
                break
            if t == 0:
                _, j = varint(data, j)
            else:
                n, j = varint(data, j)
                j += n
            i = good = j
            if f == 12:  # syntax, the last field protoc writes
                break
    except IndexError:
        pass
    return data[start:good]


def one(fs, num):
    return [v for f, v in fs if f == num]


def print_enum(b, ind):
    fs = fields(b)
    print(f"{ind}enum {one(fs, 1)[0].decode()} {{")
    for v in one(fs, 2):
        vf = fields(v)
        num = (one(vf, 2) or [0])[0]
        if num >= 1 << 63:
            num -= 1 << 64
        print(f"{ind}  {one(vf, 1)[0].decode()} = {num};")
    print(f"{ind}}}")


def print_message(b, ind):
    fs = fields(b)
    oneofs = [fields(v)[0][1].decode() for v in one(fs, 8)]
    print(f"{ind}message {one(fs, 1)[0].decode()} {{")
    for v in one(fs, 3):
        print_message(v, ind + "  ")
    for v in one(fs, 4):
        print_enum(v, ind + "  ")
    for v in one(fs, 2):
        g = dict(fields(v))
        ty = g[6].decode() if 6 in g else TYPES[g.get(5, 0)]
        label = "repeated " if g.get(4) == 3 else ""
        extra = f"  // oneof {oneofs[g[9]]}" if 9 in g else ""
        print(f"{ind}  {label}{ty} {g[1].decode()} = {g[3]};{extra}")
    print(f"{ind}}}")


def main():
    data = open(sys.argv[1], "rb").read()
    for name in FILES:
        nb = name.encode()
        m = re.search(re.escape(b"\x0a" + bytes([len(nb)]) + nb), data)
        if not m:
            print(f"// {name}: not found")
            continue
        fs = fields(descriptor_at(data, m.start()))
        print(f"// ---- {name}")
        for f, v in fs:
            if f == 4:
                print_message(v, "")
            elif f == 5:
                print_enum(v, "")


if __name__ == "__main__":
    main()
