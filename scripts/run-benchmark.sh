#!/bin/sh
# The main job on a fresh machine: creates .venv with the MPICH wheel, installs
# sparsecoll and runs the default benchmark (arguments go to `sparsecoll bench`).
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[mpich,bench,sim]"
exec .venv/bin/sparsecoll bench "$@"
