"""Microseconds per simulated point-to-point message for pattern builds on virtual ranks.

Times :func:`sparsecoll.sim.harness.build_patterns` (without verify) for the builds that
dominate issue #7's at-scale runs: ``distance_halving`` (Algorithms 1-3: O(n^2) signals,
``ANY_SOURCE`` receives) and ``common_neighbor`` (one-to-one exchanges per round), and
prints wall and CPU seconds, messages and CPU microseconds per message for each (CPU
time of this process, so that other load on the machine disturbs the comparison less).
"""

from __future__ import annotations

import argparse
import sys
import time

from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology.specs import generate


def time_build(spec: str, n: int, algorithm: str, options: dict) -> dict:
    """Wall seconds, messages sent and microseconds per message of one build."""
    start, cpu_start = time.perf_counter(), time.process_time()
    run = build_patterns(generate(spec, n), algorithm, "allgather", options, verify=False)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    messages = sum(c["messages"] for c in run.counters)
    return {"algorithm": algorithm, "spec": spec, "ranks": n, "seconds": seconds, "cpu_seconds": cpu,
            "messages": messages, "us_per_message": 1e6 * cpu / max(messages, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dh", default="512:random:density=0.3,seed=1",
                        help="N:SPEC for distance_halving (L=18, S=2); empty to skip")
    parser.add_argument("--cn", default="256:random:density=0.3,seed=1",
                        help="N:SPEC for common_neighbor; empty to skip")
    args = parser.parse_args(argv)
    jobs = []
    if args.dh:
        n, spec = args.dh.split(":", 1)
        jobs.append((spec, int(n), "distance_halving", {"ranks_per_socket": 18, "sockets_per_node": 2}))
    if args.cn:
        n, spec = args.cn.split(":", 1)
        jobs.append((spec, int(n), "common_neighbor", {}))
    for job in jobs:
        r = time_build(*job)
        print(f"{r['algorithm']:<17} {r['ranks']:>5} {r['spec']:<26} {r['seconds']:8.2f} s wall "
              f"{r['cpu_seconds']:8.2f} s cpu "
              f"{r['messages']:>9} messages {r['us_per_message']:7.2f} us/message", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
