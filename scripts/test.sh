#!/usr/bin/env bash
# Runs every test of the workspace, after installing what the tests need (idempotent):
# the PJRT CPU plugin into .deps/pjrt (the runtime tests fail, not skip, without it), and for
# the Python package (scripts/test-python.sh) a Python 3.12 venv with jax 0.12 into .deps/python.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-build-tools.sh
bash scripts/install-pjrt.sh
cargo fmt --all -- --check
# `--profile test`: build scripts and their dependencies then hash as in `cargo test` below,
# so the HiGHS C++ library (highs-sys) is built once, not once per command.
cargo clippy --workspace --all-targets --profile test --quiet -- -D warnings
cargo test --workspace
bash scripts/test-python.sh
