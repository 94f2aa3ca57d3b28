#!/usr/bin/env python3
"""Writes the windowed-einsum filetests (testdata/spmd-partitioning/windowed-*.hlo).

Each case is a small dot whose simple partitioning would all-gather an operand or all-reduce
a partial result, named after the XLA test it follows (spmd_partitioner_test.cc and
dot_handler_test.cc; "-like" where ours is a variant in our own words, with smaller shapes).
The RUN line forces `threshold_for_windowed_einsum_mib=0` (XLA's CPU pipeline never windows).

The CHECK lines are the structure a reviewer checked by hand on the first output and that a
regression must not change: the loop's state signature, every collective-permute with its
shape and pairs, the per-window dot's shape, which collectives must be absent, and the root's
shape. They are taken from `tessera opt` (TESSERA, default target/debug/tessera) when the file
is written; rerun after an intended change of the loop's shape and review the diff.

    python3 scripts/make_windowed_filetests.py
"""
import os
import re
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DIR = os.path.join(ROOT, "testdata", "spmd-partitioning")
TESSERA = os.environ.get("TESSERA", os.path.join(ROOT, "target", "debug", "tessera"))

# (file stem, XLA test, what it checks, devices, lhs, lhs sharding, rhs, rhs sharding,
#  dot dims, out shape, out sharding, extra options)
B0C2 = "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2,3}, rhs_contracting_dims={2,3}"
B0C1 = "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}"
MK = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
MKNK = "lhs_contracting_dims={1}, rhs_contracting_dims={1}"
UNROLL = ["unroll_windowed_einsum=true"]
BIDI = ["bidirectional_windowed_einsum=true"]

CASES = [
    # Gather-like, the result split like the lhs: the rhs pieces go around the ring.
    ("lhs-non-contracting-2", "EinsumLHSWindowedNonContracting-like",
     "the result split like the lhs on its free dimension, the rhs split on its own: one permute of a rhs piece inside the loop, the last window after it",
     2, "f32[4,6,4,8]", "{devices=[1,2,1,1]<=[2]}", "f32[4,10,4,8]", "{devices=[1,2,1,1]<=[2]}", B0C2, "f32[4,6,10]", "{devices=[1,2,1]<=[2]}", []),
    ("lhs-non-contracting-4", "EinsumLHSWindowedNonContracting-like",
     "the same on a ring of 4: three trips, one rhs piece moved per trip",
     4, "f32[4,8,4,8]", "{devices=[1,4,1,1]<=[4]}", "f32[4,12,4,8]", "{devices=[1,4,1,1]<=[4]}", B0C2, "f32[4,8,12]", "{devices=[1,4,1]<=[4]}", []),
    ("lhs-non-contracting-8", "EinsumLHSWindowedNonContracting-like",
     "the same on a ring of 8",
     8, "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", B0C2, "f32[2,16,16]", "{devices=[1,8,1]<=[8]}", []),
    ("lhs-non-contracting-uneven", "EinsumLHSWindowedNonContracting-like",
     "a rhs free dimension of 10 on 4 devices: pieces of 3, the accumulator of 12 cut back to 10",
     4, "f32[2,8,4,4]", "{devices=[1,4,1,1]<=[4]}", "f32[2,10,4,4]", "{devices=[1,4,1,1]<=[4]}", B0C2, "f32[2,8,10]", "{devices=[1,4,1]<=[4]}", []),
    ("lhs-non-contracting-unrolled", "UnrollEinsumLHSWindowedNonContracting-like",
     "unroll_windowed_einsum: two windows per trip on a ring of 4 (one trip, then the last piece after the loop)",
     4, "f32[4,8,4,8]", "{devices=[1,4,1,1]<=[4]}", "f32[4,12,4,8]", "{devices=[1,4,1,1]<=[4]}", B0C2, "f32[4,8,12]", "{devices=[1,4,1]<=[4]}", UNROLL),
    ("lhs-non-contracting-unrolled-8", "UnrollEinsumLHSWindowedNonContracting-like",
     "unrolled on a ring of 8: three trips of two windows, one window after",
     8, "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", B0C2, "f32[2,16,16]", "{devices=[1,8,1]<=[8]}", UNROLL),
    ("lhs-non-contracting-bidirectional", "BidirectionalEinsumLHSWindowedNonContracting-like",
     "bidirectional on a ring of 8: pieces move both ways (two permutes per trip, pairs reversed), three windows after the loop",
     8, "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", B0C2, "f32[2,16,16]", "{devices=[1,8,1]<=[8]}", BIDI),
    ("lhs-non-contracting-bidirectional-6", "BidirectionalEinsumLHSWindowedNonContracting-like",
     "bidirectional on a ring of 6 (even): the piece half a ring away comes once, forward",
     6, "f32[2,12,4]", "{devices=[1,6,1]<=[6]}", "f32[2,12,4]", "{devices=[1,6,1]<=[6]}", "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}", "f32[2,12,12]", "{devices=[1,6,1]<=[6]}", BIDI),
    ("lhs-non-contracting-bidirectional-5", "BidirectionalEinsumLHSWindowedNonContracting-like",
     "bidirectional on a ring of 5 (odd): two pieces each way, no extra forward step",
     5, "f32[10,4]", "{devices=[5,1]<=[5]}", "f32[10,4]", "{devices=[5,1]<=[5]}", MKNK, "f32[10,10]", "{devices=[5,1]<=[5]}", BIDI),
    ("lhs-non-contracting-bidirectional-3", "BidirectionalEinsumLHSWindowedNonContracting-like",
     "bidirectional on a ring of 3: one piece each way and no loop at all",
     3, "f32[6,4]", "{devices=[3,1]<=[3]}", "f32[9,4]", "{devices=[3,1]<=[3]}", MKNK, "f32[6,9]", "{devices=[3,1]<=[3]}", BIDI),
    ("lhs-non-contracting-bidirectional-2", "BidirectionalEinsumLHSWindowedNonContracting-like",
     "bidirectional asked on a ring of 2: both directions are the same neighbour, the one-way loop is built",
     2, "f32[6,4]", "{devices=[2,1]<=[2]}", "f32[8,4]", "{devices=[2,1]<=[2]}", MKNK, "f32[6,8]", "{devices=[2,1]<=[2]}", BIDI),
    # Gather-like, the result split like the rhs: the lhs pieces go around.
    ("rhs-non-contracting-2", "EinsumRHSWindowedNonContracting-like",
     "the result split like the rhs on its free dimension, the lhs split on its own: the lhs pieces move",
     2, "f32[4,6,4,8]", "{devices=[1,2,1,1]<=[2]}", "f32[4,10,4,8]", "{devices=[1,2,1,1]<=[2]}", B0C2, "f32[4,6,10]", "{devices=[1,1,2]<=[2]}", []),
    ("rhs-non-contracting-4", "EinsumRHSWindowedNonContracting-like",
     "the same on a ring of 4",
     4, "f32[4,8,4,8]", "{devices=[1,4,1,1]<=[4]}", "f32[4,12,4,8]", "{devices=[1,4,1,1]<=[4]}", B0C2, "f32[4,8,12]", "{devices=[1,1,4]<=[4]}", []),
    ("rhs-non-contracting-8", "EinsumRHSWindowedNonContracting-like",
     "the same on a ring of 8",
     8, "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", B0C2, "f32[2,16,16]", "{devices=[1,1,8]<=[8]}", []),
    ("rhs-non-contracting-uneven", "EinsumRHSWindowedNonContracting-like",
     "an lhs free dimension of 7 on 4 devices: the last lhs piece is padding past 7, cut at the end",
     4, "f32[2,7,4,4]", "{devices=[1,4,1,1]<=[4]}", "f32[2,12,4,4]", "{devices=[1,4,1,1]<=[4]}", B0C2, "f32[2,7,12]", "{devices=[1,1,4]<=[4]}", []),
    ("rhs-non-contracting-unrolled", "UnrollEinsumRHSWindowedNonContractingNoSharedSharding-like",
     "unrolled, the lhs pieces moving two steps per trip",
     4, "f32[4,8,4,8]", "{devices=[1,4,1,1]<=[4]}", "f32[4,12,4,8]", "{devices=[1,4,1,1]<=[4]}", B0C2, "f32[4,8,12]", "{devices=[1,1,4]<=[4]}", UNROLL),
    ("rhs-non-contracting-bidirectional", "BidirectionalEinsumRHSWindowedNonContractingNoSharedSharding-like",
     "bidirectional, the lhs pieces moving both ways on a ring of 8",
     8, "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", "f32[2,16,4,4]", "{devices=[1,8,1,1]<=[8]}", B0C2, "f32[2,16,16]", "{devices=[1,1,8]<=[8]}", BIDI),
    ("rhs-non-contracting-bidirectional-4", "BidirectionalEinsumRHSWindowedNonContractingNoSharedSharding-like",
     "bidirectional on a ring of 4: one piece each way before, the far piece after; no trip is left for a loop",
     4, "f32[4,8,4,8]", "{devices=[1,4,1,1]<=[4]}", "f32[4,12,4,8]", "{devices=[1,4,1,1]<=[4]}", B0C2, "f32[4,8,12]", "{devices=[1,1,4]<=[4]}", BIDI),
    ("rhs-non-contracting-no-shared-sharding", "EinsumRHSWindowedNonContractingNoSharedSharding-like",
     "the lhs split along its batch dimension instead: an all-to-all onto the ring and the loop would move more than the all-gather, so the lhs is all-gathered",
     4, "f32[4,8,4,8]", "{devices=[4,1,1,1]<=[4]}", "f32[4,12,4,8]", "{devices=[1,4,1,1]<=[4]}", B0C2, "f32[4,8,12]", "{devices=[1,1,4]<=[4]}", []),
    ("rhs-non-contracting-device-order", "EinsumRHSWindowedNonContracting-like",
     "an explicit device order {3,1,0,2} on all three: the ring follows it",
     4, "f32[8,4]", "{devices=[4,1]3,1,0,2}", "f32[12,4]", "{devices=[4,1]3,1,0,2}", MKNK, "f32[8,12]", "{devices=[1,4]3,1,0,2}", []),
    ("lhs-non-contracting-device-order", "EinsumLHSWindowedNonContracting-like",
     "the rhs pieces on devices {3,1,0,2}, the lhs and result on 0..3: the ring is the rhs's own order",
     4, "f32[8,4]", "{devices=[4,1]<=[4]}", "f32[12,4]", "{devices=[4,1]3,1,0,2}", MKNK, "f32[8,12]", "{devices=[4,1]<=[4]}", []),
    ("lhs-non-contracting-mesh-2x4", "EinsumLHSWindowedNonContracting-like",
     "a 2x4 mesh: batch split 2, free dimensions split 4; four-device rings inside each batch group",
     8, "f32[4,8,8]", "{devices=[2,4,1]<=[8]}", "f32[4,12,8]", "{devices=[2,4,1]<=[8]}", "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}", "f32[4,8,12]", "{devices=[2,4,1]<=[8]}", []),
    ("lhs-non-contracting-mesh-transposed", "EinsumLHSWindowedNonContracting-like",
     "a 2x4 mesh with the batch groups strided (devices [4,2] transposed): rings of devices {0,2,4,6} and {1,3,5,7}",
     8, "f32[4,8,8]", "{devices=[2,4,1]<=[4,2]T(1,0)}", "f32[4,12,8]", "{devices=[2,4,1]<=[4,2]T(1,0)}", "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}", "f32[4,8,12]", "{devices=[2,4,1]<=[4,2]T(1,0)}", []),
    ("lhs-non-contracting-partial-replicate", "EinsumLHSWindowedNonContracting-like",
     "the result split 2 and replicated 2 like the lhs, the rhs split 4: rings of 4 built from the result's replication, the rhs resharded onto them",
     4, "f32[8,4]", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "f32[12,4]", "{devices=[4,1]<=[4]}", MKNK, "f32[8,12]", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", []),
    ("rhs-transposed", "EinsumLHSWindowedNonContracting-like",
     "a rhs laid out [K, N] (contracting first): the ring moves column pieces",
     4, "f32[8,6]", "{devices=[4,1]<=[4]}", "f32[6,12]", "{devices=[1,4]<=[4]}", MK, "f32[8,12]", "{devices=[4,1]<=[4]}", []),
    ("bf16", "EinsumLHSWindowedNonContracting-like",
     "bf16 operands and result",
     4, "bf16[8,8]", "{devices=[4,1]<=[4]}", "bf16[12,8]", "{devices=[4,1]<=[4]}", MKNK, "bf16[8,12]", "{devices=[4,1]<=[4]}", []),
    ("s32-exact", "EinsumLHSWindowedNonContracting-like",
     "s32: the loop must be exact",
     4, "s32[8,8]", "{devices=[4,1]<=[4]}", "s32[12,8]", "{devices=[4,1]<=[4]}", MKNK, "s32[8,12]", "{devices=[4,1]<=[4]}", []),
    ("mixed-precision", "EinsumLHSWindowedNonContracting-like",
     "bf16 operands, f32 result",
     4, "bf16[8,8]", "{devices=[4,1]<=[4]}", "bf16[12,8]", "{devices=[4,1]<=[4]}", MKNK, "f32[8,12]", "{devices=[4,1]<=[4]}", []),
    # Reduce-scatter-like: contracting split on both sides, result split over the same ring.
    ("contracting-reduce-scatter-rhs", "MaxWindowedEinsumIterationWithContractingDims-like",
     "dot_handler_test's pattern: both split on the contracting dimension, the result on the rhs free dimension; the accumulator goes round, no all-reduce",
     4, "f32[8,16]", "{devices=[1,4]<=[4]}", "f32[16,12]", "{devices=[4,1]<=[4]}", MK, "f32[8,12]", "{devices=[1,4]<=[4]}", []),
    ("contracting-reduce-scatter-lhs", "EinsumRHSWindowedNonContractingReduceScatter-like",
     "the result split on the lhs free dimension: the lhs windows are sliced, the partial sums go round",
     4, "f32[8,16]", "{devices=[1,4]<=[4]}", "f32[16,12]", "{devices=[4,1]<=[4]}", MK, "f32[8,12]", "{devices=[4,1]<=[4]}", []),
    ("contracting-reduce-scatter-2", "EinsumLHSWindowedNonContractingReduceScatter-like",
     "a ring of 2: one permute of a partial sum after the first window",
     2, "f32[4,6,16]", "{devices=[1,1,2]<=[2]}", "f32[4,16,10]", "{devices=[1,2,1]<=[2]}", B0C1, "f32[4,6,10]", "{devices=[1,2,1]<=[2]}", []),
    ("contracting-reduce-scatter-8", "DefaultMaxWindowedEinsumIterationWithReduceScatter-like",
     "a ring of 8 (XLA's test uses 16 and 32; the CPU harness here has 8 devices)",
     8, "f32[8,32]", "{devices=[1,8]<=[8]}", "f32[32,16]", "{devices=[8,1]<=[8]}", MK, "f32[8,16]", "{devices=[1,8]<=[8]}", []),
    ("contracting-reduce-scatter-unrolled", "UnrollEinsumRHSWindowedNonContractingReduceScatter-like",
     "unrolled: two windows per trip, ring of 4: one trip and one window after",
     4, "f32[8,16]", "{devices=[1,4]<=[4]}", "f32[16,12]", "{devices=[4,1]<=[4]}", MK, "f32[8,12]", "{devices=[1,4]<=[4]}", UNROLL),
    ("contracting-reduce-scatter-unrolled-8", "UnrollEinsumRHSWindowedNonContractingReduceScatter-like",
     "unrolled on a ring of 8: three trips of two windows, nothing after",
     8, "f32[8,32]", "{devices=[1,8]<=[8]}", "f32[32,16]", "{devices=[8,1]<=[8]}", MK, "f32[8,16]", "{devices=[1,8]<=[8]}", UNROLL),
    ("contracting-reduce-scatter-bidirectional", "BidirectionalEinsumRHSWindowedNonContractingReduceScatter-like",
     "bidirectional accumulation on a ring of 4: one partial sum goes each way, the backward one a step further; no trip is left for a loop",
     4, "f32[8,16]", "{devices=[1,4]<=[4]}", "f32[16,12]", "{devices=[4,1]<=[4]}", MK, "f32[8,12]", "{devices=[1,4]<=[4]}", BIDI),
    ("contracting-reduce-scatter-bidirectional-8", "BidirectionalEinsumRHSWindowedNonContractingReduceScatter-like",
     "bidirectional accumulation on a ring of 8: two accumulators per trip going opposite ways (pairs reversed), each window summed from both",
     8, "f32[8,32]", "{devices=[1,8]<=[8]}", "f32[32,16]", "{devices=[8,1]<=[8]}", MK, "f32[8,16]", "{devices=[1,8]<=[8]}", BIDI),
    ("contracting-reduce-scatter-bidirectional-5", "BidirectionalEinsumRHSWindowedNonContractingReduceScatter-like",
     "bidirectional accumulation on a ring of 5 (odd): two steps each way, uneven contracting and result sizes",
     5, "f32[6,13]", "{devices=[1,5]<=[5]}", "f32[13,9]", "{devices=[5,1]<=[5]}", MK, "f32[6,9]", "{devices=[1,5]<=[5]}", BIDI),
    ("contracting-uneven", "EinsumRHSWindowedContracting-like",
     "a contracting dimension of 14 on 4 devices: both pieces' padding zeroed before the loop",
     4, "f32[8,14]", "{devices=[1,4]<=[4]}", "f32[14,12]", "{devices=[4,1]<=[4]}", MK, "f32[8,12]", "{devices=[1,4]<=[4]}", []),
    ("contracting-uneven-output", "EinsumRHSWindowedContracting-like",
     "a result dimension of 10 on 4 devices: the rhs padded to 12 so that every window is whole",
     4, "f32[8,16]", "{devices=[1,4]<=[4]}", "f32[16,10]", "{devices=[4,1]<=[4]}", MK, "f32[8,10]", "{devices=[1,4]<=[4]}", []),
    ("contracting-batch", "EinsumLHSWindowedNonContractingReduceScatter-like",
     "batch split 2 and contracting split 2 on a 2x2 mesh: rings of 2 inside each batch group",
     4, "f32[4,6,16]", "{devices=[2,1,2]<=[4]}", "f32[4,16,10]", "{devices=[2,2,1]<=[4]}", B0C1, "f32[4,6,10]", "{devices=[2,1,2]<=[4]}", []),
    ("rhs-contracting-lhs-free", "EinsumRHSWindowedContracting-like",
     "the lhs split on its free dimension, the rhs on the contracting one, the result on the rhs free dimension: the lhs is moved to the contracting split, then the partial sums go round",
     2, "f32[4,6,16]", "{devices=[1,2,1]<=[2]}", "f32[4,16,10]", "{devices=[1,2,1]<=[2]}", B0C1, "f32[4,6,10]", "{devices=[1,1,2]<=[2]}", []),
    ("lhs-contracting-rhs-free", "EinsumLHSWindowedContracting-like",
     "the mirror: the lhs split on the contracting dimension, the rhs on its free dimension, the result on the lhs free dimension",
     2, "f32[4,6,16]", "{devices=[1,1,2]<=[2]}", "f32[4,16,10]", "{devices=[1,1,2]<=[2]}", B0C1, "f32[4,6,10]", "{devices=[1,2,1]<=[2]}", []),
    # When no loop is built.
    ("max-iterations-too-low", "MaxWindowedEinsumIterationWithContractingDims",
     "max_windowed_einsum_iteration=2 on a ring of 4: no loop",
     4, "f32[8,16]", "{devices=[1,4]<=[4]}", "f32[16,12]", "{devices=[4,1]<=[4]}", MK, "f32[8,12]", "{devices=[1,4]<=[4]}", ["max_windowed_einsum_iteration=2"]),
    ("max-iterations-enough", "MaxWindowedEinsumIterationWithContractingDims",
     "max_windowed_einsum_iteration=4 on a ring of 4: the loop",
     4, "f32[8,16]", "{devices=[1,4]<=[4]}", "f32[16,12]", "{devices=[4,1]<=[4]}", MK, "f32[8,12]", "{devices=[1,4]<=[4]}", ["max_windowed_einsum_iteration=4"]),
    ("max-iterations-zero", "MaxWindowedEinsumIterationEdgeCases",
     "max_windowed_einsum_iteration=0: no loop on 8 devices",
     8, "f32[8,32]", "{devices=[1,8]<=[8]}", "f32[32,16]", "{devices=[8,1]<=[8]}", MK, "f32[8,16]", "{devices=[1,8]<=[8]}", ["max_windowed_einsum_iteration=0"]),
    ("max-iterations-batch", "MaxWindowedEinsumIterationBatchDims-like",
     "batch dimensions split alike on both sides and the result: nothing to gather, no loop",
     4, "f32[8,6,4]", "{devices=[4,1,1]<=[4]}", "f32[8,4,10]", "{devices=[4,1,1]<=[4]}", B0C1, "f32[8,6,10]", "{devices=[4,1,1]<=[4]}", []),
]

# Cases with a threshold other than 0, or an input of their own.
SPECIAL = {
    "threshold-default": ("EinsumLHSWindowedNonContracting-like",
        "the default threshold (256 MiB): a small dot is not windowed, the rhs is all-gathered", 4, None),
    "threshold-one-mib": ("EinsumLHSWindowedNonContracting-like",
        "threshold 1 MiB and a rhs of 2 MiB to gather (the lhs of 1 MiB may not be windowed, XLA's rule: at least the threshold whole): windowed; cheaper than gathering the lhs and moving the 8 MiB result", 4, ["threshold_for_windowed_einsum_mib=1"]),
    "threshold-one-mib-small": ("EinsumLHSWindowedNonContracting-like",
        "threshold 1 MiB and a rhs of exactly 1 MiB (windowing allowed: XLA's rule is at least the threshold) but small pieces of the lhs", 4, ["threshold_for_windowed_einsum_mib=1"]),
}


def module(name, n, lhs, ls, rhs, rs, dims, out, os_, body=None):
    head = f"HloModule windowed_{name.replace('-', '_')}, num_partitions={n}\n\n"
    if body:
        return head + body
    return head + (
        f"ENTRY %entry (lhs: {lhs}, rhs: {rhs}) -> {out} {{\n"
        f"  %lhs = {lhs} parameter(0), sharding={ls}\n"
        f"  %rhs = {rhs} parameter(1), sharding={rs}\n"
        f"  ROOT %dot = {out} dot(%lhs, %rhs), {dims}, sharding={os_}\n"
        "}\n"
    )


def run_line(options):
    opts = " ".join(f"--pass-option spmd-partitioning.{o}" for o in options)
    return f"// RUN: tessera opt --passes spmd-partitioning {opts}".rstrip()


def pairs(p):
    """`source_target_pairs={{a,b},...}` for a CHECK line (FileCheck reads `{{` as a regex)."""
    return p.replace("={{", "={{[{][{]}}", 1)


def checks(text, out):
    """CHECK lines from `tessera opt`'s output `out` (see the module docs)."""
    lines = out.splitlines()
    c = []
    body = [l for l in lines if l.startswith("%windowed_dot_body")]
    entry = next(i for i, l in enumerate(lines) if l.startswith("ENTRY"))
    if body:
        sig = re.match(r"%windowed_dot_body\S* \(windowed_state\S*: (.*)\) -> ", body[0]).group(1)
        c.append(f"// CHECK: %windowed_dot_body{{{{.*}}}} (windowed_state{{{{.*}}}}: {sig})")
        start = lines.index(body[0])
        for l in lines[start:]:
            if l.startswith("}"):
                break
            m = re.search(r"= (\S+) collective-permute\(.*(source_target_pairs=\S+)", l)
            if m:
                c.append(f"// CHECK: {m.group(1)} collective-permute({{{{.*}}}}{pairs(m.group(2))}")
            m = re.search(r"= (\S+) dot\(", l)
            if m:
                c.append(f"// CHECK: {m.group(1)} dot(")
    c.append("// CHECK: ENTRY")
    ent = lines[entry:]
    if body:
        c.append("// CHECK: while(")
        ent = ent[next(i for i, l in enumerate(ent) if " while(" in l):]
        for l in ent:
            m = re.search(r"= (\S+) collective-permute\(.*(source_target_pairs=\S+)", l)
            if m:
                c.append(f"// CHECK: {m.group(1)} collective-permute({{{{.*}}}}{pairs(m.group(2))}")
    else:
        c.append("// CHECK-NOT: while(")
        if "all-gather(" in out:
            c.append("// CHECK: all-gather(")
    # Collectives the simple strategies would emit and the loop must not: absent from the
    # entry (checked after ENTRY and again before the root).
    nots = [f"// CHECK-NOT: {k}(" for k in ("all-gather", "all-reduce", "reduce-scatter",
                                            "all-to-all") if k + "(" not in out]
    at = c.index("// CHECK: ENTRY") + 1
    c[at:at] = nots
    c += nots
    root = next(l for l in ent if l.strip().startswith("ROOT"))
    m = re.match(r"\s*ROOT %\S+ = (.*?) ([a-z][a-z\-]*)\(", root)
    c.append(f"// CHECK: ROOT {{{{.*}}}} = {m.group(1)} {m.group(2)}(")
    return c


# What the dot's cost model chose where it is not the loop the case was written for (the
# loops are candidates of the cost model, docs/spmd-windowed-einsum.md), bytes per device.
LOOP_OTHER_SIDE = ("The cost model windows the {small} operand instead, the result split like the "
                   "{big} and moved to its sharding by one all-to-all: {now} bytes per device, "
                   "where windowing the {big} moved {old}.")
NOTES = {
    "bf16": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now=132, old=144),
    "lhs-non-contracting-2": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now="1,776", old="2,560"),
    "lhs-non-contracting-4": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now="3,360", old="4,608"),
    "lhs-non-contracting-mesh-2x4": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now=528, old=576),
    "lhs-non-contracting-mesh-transposed": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now=528, old=576),
    "lhs-non-contracting-uneven": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now=888, old="1,152"),
    "lhs-non-contracting-unrolled": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now="3,360", old="4,608"),
    "rhs-transposed": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now=216, old=216)
        + " Equal bytes; the lhs loop holds less (peak 264 bytes against 288).",
    "s32-exact": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now=264, old=288),
    "then-elementwise": LOOP_OTHER_SIDE.format(small="lhs", big="rhs", now=264, old=288),
    "lhs-contracting-rhs-free": "Not windowed: the cost model gathers the lhs and moves the result by an "
        "all-to-all (1,008 bytes per device) where the accumulating loop moves 1,120.",
    "rhs-non-contracting-uneven": "Not windowed: the cost model computes the result split like the rhs "
        "and gathers it (672 bytes per device, no padding moved) where the loop moves 768 (its last "
        "piece is padding).",
    "two-dots-share-operand": "The shared rhs is not windowed; each dot windows its own lhs instead and "
        "moves its result by one all-to-all (528 bytes per device for the two), where one all-gather "
        "of the shared rhs would serve both (288): the per-dot cost does not see the sharing "
        "(docs/spmd-dot.md).",
    "max-iterations-too-low": "Not windowed; the dot handler's cost model then reduce-scatters the "
        "partial sums along the result's columns (288 bytes per device, where all-reduce and slice "
        "move 576).",
    "max-iterations-zero": "Not windowed; the partial sums are reduce-scattered along the result's "
        "columns by the dot's cost model.",
    "rhs-non-contracting-no-shared-sharding": "Not windowed; the dot's cost model then moves the rhs "
        "to the lhs's batch split and the result back by two all-to-alls (1,440 bytes per device) "
        "instead of gathering the lhs (3,072).",
    "threshold-default": "Not windowed; the dot's cost model gathers the smaller lhs and moves the "
        "result's split by one all-to-all (264 bytes per device; gathering the rhs: 288).",
    "threshold-one-mib-small": "Not windowed; the dot's cost model gathers the small lhs and moves "
        "the result's split by one all-to-all (12,288 bytes per device instead of 786,432 to gather "
        "the rhs).",
}


def write(stem, xla, what, options, mod):
    path = os.path.join(DIR, f"windowed-{stem}.hlo")
    note = f" {NOTES[stem]}" if stem in NOTES else ""
    text = f"{run_line(options)}\n// XLA {xla}: {what}.{note}\n{mod}"
    with open(path, "w") as f:
        f.write(text)
    args = [TESSERA, "opt", path, "--passes", "spmd-partitioning"]
    for o in options:
        args += ["--pass-option", f"spmd-partitioning.{o}"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    with open(path, "w") as f:
        f.write(text + "\n".join(checks(text, out)) + "\n")


def main():
    for (stem, xla, what, n, lhs, ls, rhs, rs, dims, out, os_, opts) in CASES:
        write(stem, xla, what, ["threshold_for_windowed_einsum_mib=0"] + opts,
              module(stem, n, lhs, ls, rhs, rs, dims, out, os_))
    # The default threshold: nothing windowed.
    xla, what, n, _ = SPECIAL["threshold-default"]
    write("threshold-default", xla, what, [],
          module("threshold-default", n, "f32[8,8]", "{devices=[4,1]<=[4]}", "f32[12,8]",
                 "{devices=[4,1]<=[4]}", MKNK, "f32[8,12]", "{devices=[4,1]<=[4]}"))
    xla, what, n, opts = SPECIAL["threshold-one-mib"]
    write("threshold-one-mib", xla, what, opts,
          module("threshold-one-mib", n, "f32[1023,256]", "{devices=[4,1]<=[4]}", "f32[2048,256]",
                 "{devices=[4,1]<=[4]}", MKNK, "f32[1023,2048]", "{devices=[4,1]<=[4]}"))
    xla, what, n, opts = SPECIAL["threshold-one-mib-small"]
    write("threshold-one-mib-small", xla, what, opts,
          module("threshold-one-mib-small", n, "f32[8,256]", "{devices=[4,1]<=[4]}",
                 "f32[1024,256]", "{devices=[4,1]<=[4]}", MKNK, "f32[8,1024]",
                 "{devices=[4,1]<=[4]}"))
    # Whole modules of their own.
    for stem, xla, what, n, body in EXTRA:
        write(stem, xla, what, ["threshold_for_windowed_einsum_mib=0"], module(stem, n, *[None] * 7, body=body))


EXTRA = [
    ("two-dots-share-operand", "EinsumRHSWindowedNonContractingNoDoubleAG-like",
     "two dots read the same rhs: one all-gather serves both, where a loop per dot would move the rhs twice; not windowed", 4,
     """ENTRY %entry (a: f32[8,8], b: f32[8,8], w: f32[12,8]) -> (f32[8,12], f32[8,12]) {
  %a = f32[8,8] parameter(0), sharding={devices=[4,1]<=[4]}
  %b = f32[8,8] parameter(1), sharding={devices=[4,1]<=[4]}
  %w = f32[12,8] parameter(2), sharding={devices=[4,1]<=[4]}
  %dot.a = f32[8,12] dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}, sharding={devices=[4,1]<=[4]}
  %dot.b = f32[8,12] dot(%b, %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}, sharding={devices=[4,1]<=[4]}
  ROOT %t = (f32[8,12], f32[8,12]) tuple(%dot.a, %dot.b), sharding={{devices=[4,1]<=[4]}, {devices=[4,1]<=[4]}}
}
"""),
    ("then-elementwise", "EinsumLHSWindowedNonContracting-like",
     "the loop's result used by an add and a tanh: the users take the accumulator as any local value", 4,
     """ENTRY %entry (x: f32[8,8], w: f32[12,8], bias: f32[8,12]) -> f32[8,12] {
  %x = f32[8,8] parameter(0), sharding={devices=[4,1]<=[4]}
  %w = f32[12,8] parameter(1), sharding={devices=[4,1]<=[4]}
  %bias = f32[8,12] parameter(2), sharding={devices=[4,1]<=[4]}
  %dot = f32[8,12] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}, sharding={devices=[4,1]<=[4]}
  %add = f32[8,12] add(%dot, %bias), sharding={devices=[4,1]<=[4]}
  ROOT %tanh = f32[8,12] tanh(%add), sharding={devices=[4,1]<=[4]}
}
"""),
    ("from-broadcast", "EinsumRHSWindowedContractingFromBroadcast-like",
     "the rhs is a broadcast of a vector, split on its free dimension: the pieces travel around the ring as the vector and each trip broadcasts the one it holds (code motion; 96 bytes per device, where the broadcast pieces move 288)", 4,
     """ENTRY %entry (x: f32[8,8], v: f32[8]) -> f32[8,12] {
  %x = f32[8,8] parameter(0), sharding={devices=[4,1]<=[4]}
  %v = f32[8] parameter(1), sharding={replicated}
  %w = f32[12,8] broadcast(%v), dimensions={1}, sharding={devices=[4,1]<=[4]}
  ROOT %dot = f32[8,12] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}, sharding={devices=[4,1]<=[4]}
}
"""),
    ("code-motion-broadcast-windowed-dim", "EinsumRHSWindowedContractingFromBroadcast-like",
     "an accumulating loop whose sliced operand is a broadcast of a vector along the windowed dimension: the vector enters the loop and each window broadcasts its slice (code motion); the whole rhs is never built", 4,
     """ENTRY %entry (x: f32[8,16], v: f32[12]) -> f32[8,12] {
  %x = f32[8,16] parameter(0), sharding={devices=[1,4]<=[4]}
  %v = f32[12] parameter(1), sharding={replicated}
  %w = f32[16,12] broadcast(%v), dimensions={1}, sharding={devices=[4,1]<=[4]}
  ROOT %dot = f32[8,12] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[1,4]<=[4]}
}
"""),
    ("code-motion-broadcast-other-dim", "EinsumLHSWindowedContractingFromBroadcast-like",
     "the sliced operand is a broadcast of a vector along its contracting dimension only: each window is a broadcast of the vector to the window's shape, nothing sliced (code motion)", 4,
     """ENTRY %entry (x: f32[16,12], v: f32[16]) -> f32[8,12] {
  %v = f32[16] parameter(1), sharding={devices=[4]<=[4]}
  %a = f32[8,16] broadcast(%v), dimensions={1}, sharding={devices=[1,4]<=[4]}
  %x = f32[16,12] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT %dot = f32[8,12] dot(%a, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]<=[4]}
}
"""),
    ("code-motion-uneven", "EinsumRHSWindowedContractingFromBroadcast-like",
     "code motion with a windowed dimension of 10 on 4 devices: the vector is padded to 12 before the loop", 4,
     """ENTRY %entry (x: f32[8,16], v: f32[10]) -> f32[8,10] {
  %x = f32[8,16] parameter(0), sharding={devices=[1,4]<=[4]}
  %v = f32[10] parameter(1), sharding={replicated}
  %w = f32[16,10] broadcast(%v), dimensions={1}, sharding={devices=[4,1]<=[4]}
  ROOT %dot = f32[8,10] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[1,4]<=[4]}
}
"""),
    ("inside-while", "EinsumLHSWindowedNonContracting-like",
     "the dot inside a while body (a layer loop): the windowed loop is nested in the partitioned body", 4,
     """%cond (p: (s32[], f32[8,8], f32[8,8])) -> pred[] {
  %p = (s32[], f32[8,8], f32[8,8]) parameter(0), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[4,1]<=[4]}}
  %i = s32[] get-tuple-element(%p), index=0, sharding={replicated}
  %three = s32[] constant(3), sharding={replicated}
  ROOT %lt = pred[] compare(%i, %three), direction=LT, sharding={replicated}
}

%body (p: (s32[], f32[8,8], f32[8,8])) -> (s32[], f32[8,8], f32[8,8]) {
  %p = (s32[], f32[8,8], f32[8,8]) parameter(0), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[4,1]<=[4]}}
  %i = s32[] get-tuple-element(%p), index=0, sharding={replicated}
  %x = f32[8,8] get-tuple-element(%p), index=1, sharding={devices=[4,1]<=[4]}
  %w = f32[8,8] get-tuple-element(%p), index=2, sharding={devices=[4,1]<=[4]}
  %dot = f32[8,8] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}, sharding={devices=[4,1]<=[4]}
  %scale = f32[] constant(0.125), sharding={replicated}
  %s = f32[8,8] broadcast(%scale), dimensions={}, sharding={devices=[4,1]<=[4]}
  %y = f32[8,8] multiply(%dot, %s), sharding={devices=[4,1]<=[4]}
  %one = s32[] constant(1), sharding={replicated}
  %i1 = s32[] add(%i, %one), sharding={replicated}
  ROOT %t = (s32[], f32[8,8], f32[8,8]) tuple(%i1, %y, %w), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[4,1]<=[4]}}
}

ENTRY %entry (x: f32[8,8], w: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8] parameter(0), sharding={devices=[4,1]<=[4]}
  %w = f32[8,8] parameter(1), sharding={devices=[4,1]<=[4]}
  %zero = s32[] constant(0), sharding={replicated}
  %init = (s32[], f32[8,8], f32[8,8]) tuple(%zero, %x, %w), sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[4,1]<=[4]}}
  %loop = (s32[], f32[8,8], f32[8,8]) while(%init), condition=%cond, body=%body, sharding={{replicated}, {devices=[4,1]<=[4]}, {devices=[4,1]<=[4]}}
  ROOT %out = f32[8,8] get-tuple-element(%loop), index=1, sharding={devices=[4,1]<=[4]}
}
"""),
]

if __name__ == "__main__":
    main()
