#!/usr/bin/env python3
"""Makes testdata/compile/tf_mlp_step.hlo: HLO as TensorFlow's tf2xla produces it, for
crates/compile/tests/inputs.rs (never a product dependency; TensorFlow is not in the jax
oracle venv: use a scratch venv).

    python3.12 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0
    /tmp/tfvenv/bin/python scripts/make_tf_input.py

A training step of a two-layer MLP (GradientTape, SGD) compiled with
`tf.function(jit_compile=True)` and read back with `experimental_get_compiler_ir(...)(stage="hlo")`.
Shardings for 8 devices come from TensorFlow's own `xla_sharding` annotations, which tf2xla
lowers to `custom-call(...), custom_call_target="Sharding"`: the batch split 8 ways, the first
weight split by columns 8 ways. TensorFlow's module has `XLA_Args`/`XLA_Retvals` metadata, TF op
types and names, and a tuple result read through get-tuple-element.
"""
import os
import re

import tensorflow as tf
from tensorflow.python.compiler.xla.experimental import xla_sharding

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "compile")


@tf.function(jit_compile=True)
def step(x, y, w1, w2):
    x = xla_sharding.split(x, 0, 8, use_sharding_op=True)
    w1 = xla_sharding.split(w1, 1, 8, use_sharding_op=True)
    with tf.GradientTape() as tape:
        tape.watch([w1, w2])
        h = tf.nn.relu(tf.matmul(x, w1))
        out = tf.matmul(h, w2)
        loss = tf.reduce_mean(tf.square(out - y))
    g1, g2 = tape.gradient(loss, [w1, w2])
    return w1 - 0.01 * g1, w2 - 0.01 * g2, loss


def main():
    args = [tf.zeros([32, 64]), tf.zeros([32, 16]), tf.zeros([64, 128]), tf.zeros([128, 16])]
    text = step.experimental_get_compiler_ir(*args)(stage="hlo")
    # The source paths name this machine's scratch venv; they say nothing about the module.
    text = re.sub(r' source_file="[^"]*"| source_line=\d+', "", text)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tf_mlp_step.hlo"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
