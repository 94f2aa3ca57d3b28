#!/usr/bin/env bash
# Installs OpenXLA's CPU PJRT plugin (PyPI wheel xla-cpu-pjrt 0.0.1, PJRT C API 0.81)
# into $REPO/.deps/pjrt so that tessera-runtime finds
#   .deps/pjrt/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so
# without any environment variable. Idempotent: does nothing when the plugin is
# already there; the wheel's sha256 is checked before anything is unpacked.
set -euo pipefail

VERSION="0.0.1"
SHA256="55837b6b7b47daa717f2d9a5a03563ea0ceaa338d06a81a1e2d3f060d960decc"
WHEEL="xla_cpu_pjrt-${VERSION}-py3-none-manylinux_2_27_x86_64.whl"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${REPO}/.deps/pjrt"
PLUGIN="${DEST}/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"
DOWNLOAD="${REPO}/.deps/download"
PYTHON="${PYTHON:-python3}"

if [[ -f "${PLUGIN}" && -f "${DEST}/.installed-${SHA256}" ]]; then
  echo "PJRT CPU plugin already installed: ${PLUGIN}"
  exit 0
fi

mkdir -p "${DOWNLOAD}"
if [[ ! -f "${DOWNLOAD}/${WHEEL}" ]]; then
  "${PYTHON}" -m pip download --no-deps --quiet -d "${DOWNLOAD}" "xla-cpu-pjrt==${VERSION}"
fi

actual="$(sha256sum "${DOWNLOAD}/${WHEEL}" | cut -d' ' -f1)"
if [[ "${actual}" != "${SHA256}" ]]; then
  echo "error: sha256 of ${WHEEL} is ${actual}, expected ${SHA256}" >&2
  rm -f "${DOWNLOAD}/${WHEEL}"
  exit 1
fi

rm -rf "${DEST}"
mkdir -p "${DEST}"
"${PYTHON}" -m zipfile -e "${DOWNLOAD}/${WHEEL}" "${DEST}"
if [[ ! -f "${PLUGIN}" ]]; then
  echo "error: ${PLUGIN} missing after unpacking ${WHEEL}" >&2
  exit 1
fi
touch "${DEST}/.installed-${SHA256}"
echo "PJRT CPU plugin installed: ${PLUGIN}"
