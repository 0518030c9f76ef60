"""An older commit's call path against this checkout's, in one process (a change's gain on the call path).

Run: mpiexec -n 2 python benchmarks/executor-overhead/two_versions.py --old REV [--reps 4000]
     [--edges 8] [--bytes 8] [--algorithm direct]

Between two launches the library's own 8 B call moves by more than a change to sparsecoll's call
path does (Open MPI, 2 ranks: 2.2 to 7.1 us), so two versions are compared in the same
launch. Rank 0 extracts ``src/sparsecoll`` of ``REV`` (``git archive``) into a temporary
folder as the package ``sparsecoll_old`` (its absolute imports renamed); both versions wrap the
same ring of ``--edges`` edges to the next rank. Per form, the library's call and both
versions' are timed the benchmark's way (:func:`sparsecoll.tools.fair_timing.interleaved_medians`:
interleaved, each after a barrier, the maximum over ranks); printed: the medians and each
version's ratio to the library's. The two versions keep separate caches, requests and
progress engines; each runs only its own calls.
"""

import argparse
import importlib.util
import io
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile

import numpy
from mpi4py import MPI

import sparsecoll
from sparsecoll.tools.fair_timing import fix_malloc_threshold, fresh_buffer, interleaved_medians

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^(\s*)(from|import) sparsecoll(?=[.\s]|$)", re.MULTILINE)


def extract_old(revision: str, folder: pathlib.Path) -> None:
    """``src/sparsecoll`` of ``revision`` as the package ``folder/sparsecoll_old``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src/sparsecoll"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    package = folder / "sparsecoll_old"
    (folder / "src" / "sparsecoll").rename(package)
    for path in package.rglob("*.py"):
        path.write_text(IMPORT.sub(r"\1\2 sparsecoll_old", path.read_text()))


def import_old(package: pathlib.Path):
    """Import the extracted package (its modules are all loaded by its ``__init__``'s imports or
    on demand from ``package``, which stays in the module's search locations)."""
    spec = importlib.util.spec_from_file_location("sparsecoll_old", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["sparsecoll_old"] = module
    spec.loader.exec_module(module)
    return module


def form_call(comm, form: str, send, recv):
    """One call of the alltoall in ``form`` (a persistent request is made once, here)."""
    if form == "blocking":
        return lambda: comm.Neighbor_alltoall(send, recv)
    if form == "nonblocking":
        return lambda: comm.Ineighbor_alltoall(send, recv).Wait()
    request = comm.Neighbor_alltoall_init(send, recv)

    def persistent():
        request.Start()
        request.Wait()
    persistent.request = request
    return persistent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the git revision to compare against")
    parser.add_argument("--reps", type=int, default=4000)
    parser.add_argument("--edges", type=int, default=8)
    parser.add_argument("--bytes", type=int, default=8, help="bytes per block")
    parser.add_argument("--algorithm", default="direct")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    with tempfile.TemporaryDirectory() as shared:
        folder = world.bcast(shared if rank == 0 else None)
        if rank == 0:
            extract_old(args.old, pathlib.Path(folder))
        world.Barrier()
        sparsecoll_old = import_old(pathlib.Path(folder) / "sparsecoll_old")
        compare(args, sparsecoll_old)
        world.Barrier()  # every rank is done (modules load on demand) before rank 0's folder goes


def compare(args, sparsecoll_old) -> None:
    """Time the library and both versions in each form; rank 0 prints."""
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    fix_malloc_threshold()
    graph = world.Create_dist_graph_adjacent([(rank - 1) % size] * args.edges, [(rank + 1) % size] * args.edges)
    send = fresh_buffer(numpy.ones(args.edges * args.bytes, dtype="u1"))
    recv = fresh_buffer(numpy.zeros(args.edges * args.bytes, dtype="u1"))
    versions = {"library": graph, "old": sparsecoll_old.wrap(graph, args.algorithm),
                "new": sparsecoll.wrap(graph, args.algorithm)}
    if rank == 0:
        print(f"# {args.algorithm} at {size} ranks, {args.edges} edges, {args.bytes} B blocks, {args.reps} "
              f"repetitions; old = {args.old}, new = this checkout; {MPI.Get_library_version().splitlines()[0]}")
    for form in ("blocking", "nonblocking", "persistent"):
        calls = [form_call(comm, form, send, recv) for comm in versions.values()]
        for call in calls:
            for _ in range(20):
                call()
        library, old, new = interleaved_medians(world, calls, args.reps)
        if rank == 0:
            print(f"{form:12s} library {library * 1e6:7.2f} us  old {old * 1e6:7.2f} us ({old / library:.3f} x)"
                  f"  new {new * 1e6:7.2f} us ({new / library:.3f} x)", flush=True)
        for call in calls:
            request = getattr(call, "request", None)
            if request is not None:
                request.Free()
    graph.Free()


if __name__ == "__main__":
    main()
