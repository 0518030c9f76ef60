"""Run any registered algorithm's builder on N virtual ranks and verify its Patterns.

Registry-driven: whatever :mod:`sparsecoll.algorithms` registers runs here unchanged
(``build(topology, comm, options, family)`` with a :class:`~sparsecoll.sim.VirtualComm`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..algorithms import build_pattern, check_options
from ..algorithms import get as get_algorithm
from ..algorithms.common_neighbor import pair_friends
from ..algorithms.protocol import ProtocolChannel
from ..model.params import with_loggp_file
from ..pattern import family_of, stats
from ..verify import verify as verify_patterns
from .world import World


@dataclass
class BuildRun:
    """The Patterns of all virtual ranks for one algorithm and family, with costs."""

    algorithm: str
    family: str
    topologies: list
    patterns: list
    counters: list  # per rank Counters.as_dict()
    seconds: float
    verified: dict | None = None
    info: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of virtual ranks."""
        return len(self.patterns)

    def summary(self) -> dict:
        """Maximum and mean over ranks of the Pattern stats and protocol counters."""
        per_rank = [{**{k: v for k, v in stats(p).items() if isinstance(v, (int, float))}, **c}
                    for p, c in zip(self.patterns, self.counters)]
        keys = [k for k, v in per_rank[0].items() if not isinstance(v, bool)] if per_rank else []
        out = {"algorithm": self.algorithm, "family": self.family, "ranks": self.size,
               "build_seconds": self.seconds}
        for key in keys:
            values = [r[key] for r in per_rank]
            out[f"max_{key}"] = max(values)
            out[f"mean_{key}"] = sum(values) / len(values)
        return out


#: The options through which an algorithm takes a rank placement (distance halving's ``L`` and ``S``).
PLACEMENT_OPTIONS = ("ranks_per_socket", "sockets_per_node")


def placement_options(algorithm: str, placement) -> dict:
    """The options that hand ``placement`` (a :class:`~sparsecoll.model.params.Placement` or
    None) to ``algorithm``: empty when it takes no placement or none is given.

    On real MPI the placement is detected or overridden by ``SPARSECOLL_PLACEMENT``
    (:mod:`sparsecoll.topology.placement`); virtual ranks have none, so a simulated run
    passes it explicitly to the algorithms that use one.
    """
    if placement is None or not all(name in get_algorithm(algorithm).options for name in PLACEMENT_OPTIONS):
        return {}
    return {"ranks_per_socket": placement.L, "sockets_per_node": placement.S}


def build_patterns(topologies, algorithm: str, family: str, options: dict | None = None,
                   verify: bool = True) -> BuildRun:
    """Build ``algorithm``'s Patterns for ``family`` on one virtual rank per Topology.

    ``topologies`` is a list of Topologies or an object with ``topologies()`` (an
    :class:`~sparsecoll.topology.generators.Adjacency`). Raises ``NotImplementedError``
    with the algorithm's reason where it does not support a rank's topology, and
    :class:`~sparsecoll.verify.VerificationError` where the Patterns are wrong.
    """
    if hasattr(topologies, "topologies"):
        topologies = topologies.topologies()
    topologies = list(topologies)
    family = family_of(family)
    entry = get_algorithm(algorithm)
    if entry.runs_library:
        raise NotImplementedError(f"algorithm {algorithm!r} has no pattern builder (it calls the MPI library)")
    options = check_options(algorithm, with_loggp_file(dict(options or {})), len(topologies))
    for topology in topologies:
        reason = entry.unsupported_reason(topology, family)
        if reason is not None:
            raise NotImplementedError(f"rank {topology.rank}: {reason}")
    world = World(len(topologies), topologies)
    start, cpu = time.perf_counter(), time.process_time()
    patterns = world.run(lambda comm: build_pattern(algorithm, comm.topology, comm, options, family))
    seconds = time.perf_counter() - start
    run = BuildRun(algorithm, family, topologies, patterns, [c.as_dict() for c in world.counters], seconds)
    run.info["build_cpu_seconds"] = time.process_time() - cpu  # wall time counts other processes' load too
    if verify:
        start, cpu = time.perf_counter(), time.process_time()
        run.verified = verify_patterns(patterns, topologies)
        run.info["verify_seconds"] = time.perf_counter() - start
        run.info["verify_cpu_seconds"] = time.process_time() - cpu
    return run


def pair_on_virtual_ranks(weights_by_rank) -> list:
    """Algorithm 2 of HiPC 2017 alone on one virtual rank per entry (tests and sweeps).

    ``weights_by_rank[p]`` maps each friend of ``p`` to the common-neighbor count (must be
    symmetric). Returns per rank ``(friend or None, iteration it ended in, messages sent)``.
    """
    def body(comm):
        channel = ProtocolChannel(comm)
        friend, iterations = pair_friends(channel, comm.Get_rank(), weights_by_rank[comm.Get_rank()])
        return friend, iterations, channel.sent
    return World(len(weights_by_rank)).run(body)
