"""Zero copy (one struct datatype over the pieces) vs packing copies, for distance_halving's messages.

Algorithm 4 of Sharifian, Sojoodi, Afsahi (2023) copies the origins' blocks into
``main_buf`` / ``buftemp`` before sending; sparsecoll's executor instead sends one struct
datatype over the blocks where they lie. A halving message carries ``k`` blocks of ``b``
bytes scattered in memory (the receive buffer and temporary space); this measures a
ping-pong of such a message between two ranks both ways:

* ``struct``: persistent requests on ``[BOTTOM, 1, struct]`` at both ends (the executor);
* ``copy``: numpy copies of the ``k`` blocks into a contiguous buffer, a contiguous send,
  and copies out at the receiver (the paper's scheme).

Run: ``mpiexec -n 2 python benchmarks/distance-halving-design/distance_halving_copy_vs_struct.py``. Prints the median
round trip (microseconds) over interleaved repetitions.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy
from mpi4py import MPI

from sparsecoll.execute.p2p import message_datatype

REPS = 300


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=REPS, help=f"interleaved round trips per case (default {REPS})")
    reps = parser.parse_args(argv).reps
    comm = MPI.COMM_WORLD
    me, peer = comm.Get_rank(), 1 - comm.Get_rank()
    if me == 0:
        print(f"{'blocks':>6} {'bytes':>7} {'struct us':>10} {'copy us':>9} {'copy/struct':>11}")
    for k in (2, 8, 32, 128):
        for b in (8, 256, 4096, 65536):
            # k scattered blocks of b bytes (every other slot of a buffer)
            space = numpy.zeros(2 * k * b, dtype=numpy.uint8) + me
            views = [space[2 * i * b:(2 * i + 1) * b] for i in range(k)]
            pieces = [(v.ctypes.data, b, MPI.BYTE) for v in views]
            datatype = message_datatype(pieces)
            send = comm.Send_init([MPI.BOTTOM, 1, datatype], peer, 1)
            recv = comm.Recv_init([MPI.BOTTOM, 1, datatype], peer, 1)
            packed_out = numpy.empty(k * b, dtype=numpy.uint8)
            packed_in = numpy.empty(k * b, dtype=numpy.uint8)
            csend = comm.Send_init([packed_out, MPI.BYTE], peer, 2)
            crecv = comm.Recv_init([packed_in, MPI.BYTE], peer, 2)
            times = {"struct": [], "copy": []}
            for _rep in range(reps):
                for how in ("struct", "copy"):
                    comm.Barrier()
                    t = time.perf_counter()
                    for turn in (0, 1):
                        if me == turn:
                            if how == "copy":
                                numpy.concatenate(views, out=packed_out)
                                MPI.Prequest.Startall([csend])
                                csend.Wait()
                            else:
                                send.Start()
                                send.Wait()
                        else:
                            if how == "copy":
                                crecv.Start()
                                crecv.Wait()
                                for i, v in enumerate(views):
                                    v[:] = packed_in[i * b:(i + 1) * b]
                            else:
                                recv.Start()
                                recv.Wait()
                    times[how].append(time.perf_counter() - t)
            for r in (send, recv, csend, crecv):
                r.Free()
            datatype.Free()
            if me == 0:
                s = statistics.median(times["struct"][reps // 10:]) * 1e6
                c = statistics.median(times["copy"][reps // 10:]) * 1e6
                print(f"{k:>6} {b:>7} {s:>10.1f} {c:>9.1f} {c / s:>11.2f}", flush=True)


if __name__ == "__main__":
    main()
