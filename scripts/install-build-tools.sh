#!/usr/bin/env bash
# Installs the Debian packages the build needs beyond Rust and gcc: cmake and libclang-dev,
# with which highs-sys builds the HiGHS MIP solver (the auto-sharding solver's exact solve)
# from its vendored source. Idempotent: does nothing when both are there. Needs root (CI is).
set -euo pipefail

PACKAGES=(cmake libclang-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("${p}")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "build tools already installed: ${PACKAGES[*]}"
  exit 0
fi
echo "installing ${missing[*]} from Debian"
SUDO=""
if [[ "$(id -u)" != 0 ]]; then
  SUDO="sudo"
fi
${SUDO} apt-get update -qq
DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq "${missing[@]}" >/dev/null
