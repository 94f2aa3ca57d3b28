#!/usr/bin/env bash
# Runs every test of the workspace, after installing what the tests need (idempotent):
# the PJRT CPU plugin into .deps/pjrt. The runtime tests fail, not skip, without it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-pjrt.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace
