"""pytest setup of the tessera package's suite (run by scripts/test.sh).

jax gets 8 CPU devices (the flag must be set before jax starts), and the runtime the PJRT CPU
plugin of this workspace's .deps/ unless TESSERA_PJRT_PLUGIN names one.
"""
import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLUGIN = os.path.join(REPO, ".deps", "pjrt", "xla_plugins", "xla_cpu_pjrt", "xla_cpu_pjrt.so")
if not os.environ.get("TESSERA_PJRT_PLUGIN") and os.path.isfile(PLUGIN):
    os.environ["TESSERA_PJRT_PLUGIN"] = PLUGIN

# The jax models of testdata are made by these scripts; the tests reuse their definitions.
sys.path.insert(0, os.path.join(REPO, "scripts", "fixtures"))
