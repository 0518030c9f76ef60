"""Cartesian collectives: the MPI suite at every rank count, and the Table 1 command."""

from __future__ import annotations

import pytest

from sparsecoll.cartesian_table import PAPER_TABLE1
from sparsecoll.cli import main

from .conftest import RANK_COUNTS, run_under_mpi


@pytest.mark.parametrize("nprocs", RANK_COUNTS)
def test_cartesian_under_mpi(nprocs):
    output = run_under_mpi(nprocs, "tests/mpi/test_cartesian_mpi.py", timeout=900)
    assert " passed" in output


def test_cartesian_table_command(capsys):
    assert main(["cartesian-table"]) == 0
    output = capsys.readouterr().out
    for (d, n), (t, c, allgather_v, alltoall_v, _) in PAPER_TABLE1.items():
        cells = f"{d:>2} {n:>2} {t:>6} {c:>4} {allgather_v:>12} {alltoall_v:>11}"
        assert cells in output, cells
    figure2 = {" ".join(line.split()[:-2]): int(line.split()[-2]) for line in output.splitlines()
               if line.endswith(" edges")}
    assert figure2 == {"plain order (0, 1, 2)": 12, "reversed order (2, 1, 0)": 6,
                       "increasing C_k order (1, 2, 0)": 6}
