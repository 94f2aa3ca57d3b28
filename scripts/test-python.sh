#!/usr/bin/env bash
# Builds the `tessera` Python package (crates/python) and runs its pytest suite, in a Python 3.12
# venv at .deps/python with jax 0.12 (jax[cpu]==0.12.0.1), numpy, pytest and maturin.
# Idempotent: the venv is made and filled once (a stamp file records it); the package is rebuilt
# from the current source every run (cargo only rebuilds what changed). scripts/test.sh runs it.
#
#   PYTHON312=/path/to/python3.12 bash scripts/test-python.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY312="${PYTHON312:-${HOME}/.pyenv/versions/3.12.1/bin/python}"
VENV=.deps/python
REQS=("jax[cpu]==0.12.0.1" "numpy" "pytest" "maturin>=1.5,<2")
STAMP="${VENV}/.installed-$(printf '%s\n' "${REQS[@]}" | sha256sum | cut -c1-16)"

if [[ ! -f "${STAMP}" ]]; then
  if [[ ! -x "${PY312}" ]]; then
    echo "error: no Python 3.12 at ${PY312} (jax 0.12 needs 3.12); set PYTHON312" >&2
    exit 1
  fi
  rm -rf "${VENV}"
  "${PY312}" -m venv "${VENV}"
  "${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check "${REQS[@]}"
  touch "${STAMP}"
else
  echo "python venv already installed: ${VENV}"
fi

# The dev profile shares its artifacts with `cargo test`; a wheel per run, installed over the last.
WHEELS=target/python-wheels
rm -rf "${WHEELS}"
(cd crates/python && "../../${VENV}/bin/maturin" build --quiet -i "../../${VENV}/bin/python" -o "../../${WHEELS}")
"${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "${WHEELS}"/tessera-*.whl

rc=0
"${VENV}/bin/python" -m pytest crates/python/tests -q -p no:cacheprovider "$@" || rc=$?
if [[ ${rc} -eq 5 ]]; then
  echo "error: pytest collected no tests in crates/python/tests" >&2
  exit 1
fi
exit ${rc}
