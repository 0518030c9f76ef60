"""Calibration measurements: Hockney's alpha and beta by ping-pong, LogGP by bursts.

The ``sparsecoll calibrate`` command (:mod:`sparsecoll.tools.calibrate`) runs these and
saves the fit.

Two ranks exchange messages of each size back and forth; half the median round trip is
the one-way time ``t(m)``, and a least-squares line ``t(m) = alpha + m * beta`` over all
sizes gives the parameters (Hockney 1994, the model of the 2023 paper §V). The file is
a :class:`~sparsecoll.model.params.Machine` in JSON, for the pair class the two ranks
form (``--pair-class``; other classes fall back to it). No presets ship: the papers
state no numeric parameters for their machines.

Load during the measurement (``--pairs``), for machines where ranks outnumber cores:

* ``one`` (default): ranks 0 and 1 ping-pong; every other launched rank (``--np``) is
  live but idle in the barrier before each round trip (with the launcher's yielding
  progress settings, as in a benchmark run with the same number of ranks);
* ``all``: ranks ``2i`` and ``2i+1`` ping-pong at the same time, every pair, so every
  rank communicates as in a neighborhood collective; a round trip's time is the maximum
  over the pairs (the benchmark's maximum over ranks), and half its median is ``t(m)``.

``--model loggp`` measures LogGP the standard way (Culler et al., "LogP performance
assessment of fast network interfaces", 1996): the per-message overhead from the slope of
*bursts*, the latency from *round trips*, both with persistent requests (``Startall`` /
``Waitall``, the calls the executors make), every pair (``2i``, ``2i+1``) at once.

* A burst: in one step every pair exchanges ``k`` messages of ``m`` bytes each way (``k``
  receives and ``k`` sends); :data:`CHAIN` steps run back to back per sample, so that the
  barrier before a sample (whose exit skew is a microsecond here) is spread over them. Each
  rank sends *and* receives every message, so once ``k`` is large enough that sending, not
  the first message's latency, bounds the step, the slope over ``k`` is a send and a receive
  overhead, ``2o``; the slope over ``m`` (``k = 1``) is ``G``.
* A round trip: the pair ping-pongs one message of the smallest size :data:`CHAIN` times
  back to back per sample; half a round trip is ``o + L + o``, so ``L`` is that minus ``2o``.

The file holds ``o`` and ``L`` so found, ``G``, and ``g = 0`` (the SC12 paper's
simplification ``o > g``). On a machine with more ranks than cores the times hold the
scheduling delays a message waits for (the timings are a maximum over ranks).
"""

from __future__ import annotations

import time

import numpy

DEFAULT_SIZES = (0, 8, 64, 512, 4096, 32768, 262144, 1048576)
PAIRS = ("one", "all")
WARMUP = 2
DEFAULT_BURSTS = (1, 2, 4, 8, 16, 32)
#: ``--model loggp``: steps (round trips) run back to back per timed sample.
CHAIN = 50


def fit_hockney(sizes, seconds) -> tuple:
    """Least-squares ``(alpha, beta)`` of ``seconds = alpha + size * beta`` (clipped at 0)."""
    sizes = numpy.asarray(sizes, dtype=float)
    seconds = numpy.asarray(seconds, dtype=float)
    if sizes.size < 2 or numpy.ptp(sizes) == 0:
        raise ValueError("sizes: need at least two different message sizes to fit alpha and beta")
    beta, alpha = numpy.polyfit(sizes, seconds, 1)
    return max(float(alpha), 0.0), max(float(beta), 0.0)


def _partner(rank: int, size: int, pairs: str):
    """The rank ``rank`` ping-pongs with (None: idle), and whether it starts the round trip."""
    if pairs == "one":
        partner = {0: 1, 1: 0}.get(rank)
    else:
        partner = rank ^ 1 if (rank ^ 1) < size else None
    return partner, partner is not None and rank < partner


def ping_pong(comm, sizes, reps: int, pairs: str = "one") -> list:
    """Half the median round-trip time per size (see the module docstring for ``pairs``).

    Collective over ``comm`` (at least 2 ranks); every rank gets the list.
    """
    from mpi4py import MPI
    if pairs not in PAIRS:
        raise ValueError(f"pairs: expected one of {PAIRS}, got {pairs!r}")
    if reps < 1:
        raise ValueError(f"reps: expected >= 1, got {reps}")
    rank, size = comm.Get_rank(), comm.Get_size()
    partner, starts = _partner(rank, size, pairs)
    times = []
    for nbytes in sizes:
        view = [numpy.zeros(max(nbytes, 1), dtype="u1"), nbytes, MPI.BYTE]

        def round_trip(view=view):
            if partner is not None and starts:
                comm.Send(view, partner, 7)
                comm.Recv(view, partner, 7)
            elif partner is not None:
                comm.Recv(view, partner, 7)
                comm.Send(view, partner, 7)
        times.append(timed_medians(comm, reps, round_trip)[0] / 2)  # idle ranks' near-0 never the maximum
    return times


def timed_medians(comm, reps: int, *runs) -> list:
    """Per run, the median over ``reps`` samples (after :data:`WARMUP`) of the maximum over ranks
    of one ``run()``'s time; each sample starts after a barrier, and several runs alternate,
    in turn first and last (forward on even repetitions, backward on odd ones). Collective
    (one allreduce at the end); every rank gets the list."""
    from mpi4py import MPI
    samples = numpy.zeros((len(runs), reps))
    for rep in range(reps + WARMUP):
        for which in (range(len(runs)) if rep % 2 == 0 else reversed(range(len(runs)))):
            comm.Barrier()
            t0 = time.perf_counter()
            runs[which]()
            if rep >= WARMUP:
                samples[which, rep - WARMUP] = time.perf_counter() - t0
    worst = numpy.empty_like(samples)
    comm.Allreduce(samples, worst, op=MPI.MAX)
    return numpy.median(worst, axis=1).tolist()


def burst_exchange(comm, points, reps: int, chain: int = CHAIN) -> list:
    """Time per step for each ``(k, m)`` in ``points``: the median over ``reps`` samples of the
    maximum over ranks, a sample being ``chain`` steps back to back.

    In a step every pair (``2i``, ``2i+1``) exchanges ``k`` messages of ``m`` bytes each way
    by persistent requests (an odd last rank idles). Collective over ``comm``; every rank gets
    the list.
    """
    from mpi4py import MPI
    if reps < 1:
        raise ValueError(f"reps: expected >= 1, got {reps}")
    rank, size = comm.Get_rank(), comm.Get_size()
    partner, _ = _partner(rank, size, "all")
    times = []
    for k, m in points:
        if k < 1 or m < 0:
            raise ValueError(f"points: expected k >= 1 messages and m >= 0 bytes, got ({k}, {m})")
        send = numpy.zeros((k, max(m, 1)), dtype="u1")
        recv = numpy.zeros_like(send)
        requests = []
        if partner is not None:
            requests = [comm.Recv_init([recv[i], m, MPI.BYTE], partner, 8) for i in range(k)]
            requests += [comm.Send_init([send[i], m, MPI.BYTE], partner, 8) for i in range(k)]

        def steps(requests=requests):
            for _ in range(chain):
                MPI.Prequest.Startall(requests)
                MPI.Request.Waitall(requests)
        times.append(timed_medians(comm, reps, steps)[0] / chain)
        for request in requests:
            request.Free()
    return times


def round_trip_chain(comm, nbytes: int, reps: int, chain: int = CHAIN) -> float:
    """Half a round trip of ``nbytes``: every pair (``2i``, ``2i+1``) ping-pongs ``chain`` times
    back to back per sample with persistent requests; the median over ``reps`` samples of the
    maximum over ranks, divided by ``2 * chain``. Collective; every rank gets it."""
    from mpi4py import MPI
    if reps < 1:
        raise ValueError(f"reps: expected >= 1, got {reps}")
    rank, size = comm.Get_rank(), comm.Get_size()
    partner, starts = _partner(rank, size, "all")
    buf = numpy.zeros(max(nbytes, 1), dtype="u1")
    requests = []
    if partner is not None:  # an odd last rank idles
        requests = [comm.Send_init([buf, nbytes, MPI.BYTE], partner, 9),
                    comm.Recv_init([buf, nbytes, MPI.BYTE], partner, 9)]

    def round_trips():
        if not requests:
            return
        first, second = requests if starts else requests[::-1]
        for _ in range(chain):
            first.Start()
            first.Wait()
            second.Start()
            second.Wait()
    half = timed_medians(comm, reps, round_trips)[0] / (2 * chain)
    for request in requests:
        request.Free()
    return half


def fit_loggp(counts, count_seconds, sizes, size_seconds, half_round_trip: float) -> dict:
    """LogGP ``L, o, g, G`` (module docstring): ``2o`` the slope of ``count_seconds`` over
    ``counts`` (the larger half of them: a step of few messages is bound by the first one's
    latency, not by the overheads), ``G`` the slope of ``size_seconds`` over ``sizes``, ``L`` = ``half_round_trip``
    minus ``2o`` and the smallest size's bytes; ``g = 0``; each clipped at 0.

    ``count_seconds[i]``: a step of ``counts[i]`` messages of the smallest size each way;
    ``size_seconds[j]``: a step of one message of ``sizes[j]`` bytes each way.
    """
    counts = numpy.asarray(counts, dtype=float)
    sizes = numpy.asarray(sizes, dtype=float)
    if counts.size < 2 or numpy.ptp(counts) == 0:
        raise ValueError("counts: need at least two different message counts to fit o")
    if sizes.size < 2 or numpy.ptp(sizes) == 0:
        raise ValueError("sizes: need at least two different message sizes to fit G")
    G, _ = numpy.polyfit(sizes, numpy.asarray(size_seconds, dtype=float), 1)
    G = max(float(G), 0.0)
    busy = counts >= numpy.median(counts)  # where sending, not the first message's latency, bounds a step
    if numpy.ptp(counts[busy]) == 0:
        busy[:] = True
    per_message, _ = numpy.polyfit(counts[busy], numpy.asarray(count_seconds, dtype=float)[busy], 1)
    o = max(float(per_message) / 2, 0.0)
    L = max(float(half_round_trip) - 2 * o - max(sizes.min() - 1, 0.0) * G, 0.0)
    return {"L": L, "o": o, "g": 0.0, "G": G}


# -- the profile of ``algorithm="auto"`` (:mod:`sparsecoll.model.profile`) ---------------------------

#: Blocks of the profile measurement: a small one (per-call and per-message costs) and a large one (beta).
PROFILE_SMALL, PROFILE_LARGE = 8, 65536
#: The stencil the multi-step costs are fitted on: 2-D 9-point, periodic.
PROFILE_STENCIL = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if (dx, dy) != (0, 0)]
#: How far past the library's eager limit the larger block of :func:`eager_straddle` lies.
STRADDLE_BYTES = 256


def eager_straddle() -> tuple:
    """The two blocks the profile measurement times the library's stencil alltoall at: the running
    library's eager limit (:class:`sparsecoll.execute.p2p.WireLimits`) and :data:`STRADDLE_BYTES` past it."""
    from ..execute.p2p import wire_limits
    eager = wire_limits().eager_bytes
    return eager, eager + STRADDLE_BYTES


def fit_profile_load(times: dict, ranks_per_core: float, pair_level: str, copy_beta: float,
                     one_way: float, base, stencil: dict) -> object:
    """A profile :class:`~sparsecoll.model.profile.Load` from the calibration's medians.

    ``times[(variant, form, edges, block)]`` is the median over repetitions of the maximum
    over ranks of one call on the ring (``edges`` = 1: one edge, to the next rank), ``variant``
    ``native`` or ``direct``; ``stencil[(algorithm, family, form, block)] = (seconds, Pattern)``
    the same on the 9-point stencil, with this rank's Pattern. With ``o`` the per-message
    overhead, ``beta`` the time per byte, ``alpha`` the latency:

    * ``o``: native on the stencil (both families, 8 B, blocking) against one edge of the ring,
      per message more (``m`` sends and receives against two): ``(T_stencil - T_1) / (m - 2) - 8 beta``.
      An earlier fit took it from the ring with 4 edges (to its 2 neighbors) against one; at 4
      ranks per core the library's messages cost more on the 8 neighbors of the stencil
      (MPICH, five calibrations: 2.6-3.3 us against 2.0-2.8 on the ring), so the model
      underpriced the library's call on the neighborhoods users run, where sparsecoll's
      executor, which sends the messages of a step to one peer as one, has fewer. (The bytes
      are charged as the model charges them: the stencil's at its size class's middle.)
    * ``beta``: native on the stencil (both families, blocking), 64 KiB against 8 B, per byte
      sent and received at the pair's level (a copy to self at ``copy_beta``). An earlier fit
      took it from one edge of the ring; the library's 8 messages of a stencil call overlap, so
      on the stencil a byte cost 0.23-0.33 ns where one edge's cost 0.43-0.91 ns (8 ranks on 2
      cores), and the model priced every 64 KiB call at 2-2.5 x its time, which hid what a
      schedule sending fewer bytes saves (``cartesian``'s allgather on Open MPI: predicted
      0.94 x the library's time, measured 0.82-0.89 x);
    * ``rendezvous``: the library's persistent alltoall on the stencil with blocks just past its
      eager limit against just within (:func:`eager_straddle`), per send and receive to another
      rank, less the bytes' cost; ``beta`` is fitted again with it taken out of the 64 KiB calls,
      every message of which is past the limit (so a 4 KiB message on Open MPI, which waits for
      a handshake as a 64 KiB one does, is not priced as 4 KiB of a 64 KiB one's time; joining
      messages to one peer saves that handshake: 8 ranks, Moore neighborhood, persistent
      alltoall, 4 KiB blocks: the library's call 90 us at 4096 B, 40 us at 3968 B; ``direct``,
      which joins them, 0.85 x the library's call);
    * ``rendezvous_step``: ``cartesian`` - ``direct`` (persistent alltoall on the stencil, blocks
      just past the eager limit) less the model's gap, per step beyond the first that waits for
      a handshake (Open MPI, 8 ranks on 2 cores, Moore, 4 KiB blocks: ``cartesian`` and
      ``common_neighbor``, two steps, predicted at 0.87-0.89 x the library's call without it,
      measured 1.02 x; ``direct`` 0.83 x). The 64 KiB gaps that fit ``per_step`` and
      ``combined_factor`` hold these waits too, so the two fits take turns until they settle;
    * ``alpha``: the one-way time of an 8 B ping-pong less two overheads;
    * the library's ``per_call[form]``: its one-edge 8 B ring call less what the model charges
      its one step;
    * sparsecoll's ``per_call[form]`` (blocking, persistent): from the one-edge ring like the
      library's, raised (never lowered) by the measured difference ``direct`` - library on the
      stencil at 8 B less the difference the model charges their messages; nonblocking from the
      ring. Not lowered: where the library pays more per edge than sparsecoll (MPICH at 2 ranks:
      ``direct`` 1.4x faster on the stencil's 8 edges, 1.3-1.6x slower on one edge), the model's
      one per-message overhead cannot hold both, and a lowered per-call cost made ``auto`` run
      ``direct`` on one-edge calls at 1.65x the library's time; kept, it misses the stencil's
      gain instead;
    * ``byte_factor`` (per family): what makes the model's difference ``direct`` - library grow
      from 8 B to 64 KiB as the measured one does (the same messages, so the per-call costs
      cancel): per byte ``direct`` moves, over ``beta``. Open MPI 5.0, 8 ranks on 2 cores:
      ``direct``'s blocking 64 KiB calls on the stencil at 1.6-1.8 x the library's, which the
      per-call costs fitted at 8 B put at 1.06 x;
    * the library's ``shortcut``: its 8 B blocking allgather on the stencil through auto's size
      comparison less the same call of its method, timed beside each other (0 where not measured);
    * ``per_step`` and ``combined_factor``: what makes the model's difference ``cartesian`` -
      ``direct`` equal the measured one at 8 B and at 64 KiB (two equations: per extra step,
      per byte of combined messages): ``per_step`` the largest over both families,
      ``combined_factor`` one per family (see :mod:`.profile` for why); ``base``'s per-step
      cost where the stencil gives ``cartesian`` no more steps than ``direct``. Steps are
      counted as auto charges them, the final local copies included (a receive block no
      arrival fills: one more step, :func:`~sparsecoll.model.choice.pattern_cost`): on 8 ranks
      the stencil's grid is 4 x 2, a neighbor along the dimension of 2 is one rank both ways,
      and ``cartesian``'s allgather copies those blocks. A fit that left the copies out put
      their cost into every step (Open MPI, 8 ranks: ``cartesian``'s 8 B allgather predicted
      at 2.19 x the library's call, measured 1.74 x; its 64 KiB allgather 0.92 x, measured 0.84 x).

    So the model charges sparsecoll's schedules what they cost on a neighborhood of the
    kind users run. The measured pair is ``pair_level`` (the ring neighbors' placement
    level); levels further out keep ``base``'s parameters where they are larger (they cannot
    be measured on one node), nearer ones take the measured values; ``self`` copies at
    ``copy_beta``. All values are clipped at 0 (``combined_factor`` at 1, at most 100).
    """
    from dataclasses import replace

    from ..pattern import FAMILIES
    from .choice import CLASS_BYTES, pattern_cost, size_class
    from .profile import FORMS, LEVELS, Load

    small, large = PROFILE_SMALL, PROFILE_LARGE

    def byte_costs(pattern, beta: float) -> float:
        """What the model charges per byte of block for the library running ``pattern``."""
        bytes_only = Load(ranks_per_core, {level: {"alpha": 0.0, "beta": copy_beta if level == "self" else beta,
                                                   "overhead": 0.0} for level in LEVELS},
                          dict.fromkeys(FORMS, 0.0), 0.0, dict.fromkeys(FORMS, 0.0))
        return pattern_cost(pattern, bytes_only, native=True).per_byte

    def messages_out(pattern) -> int:
        """The sends and receives of ``pattern`` to other ranks (those pay a rendezvous past the limit)."""
        return sum(message.peer != pattern.rank for step in pattern.steps
                   for direction in (step.sends, step.recvs) for message in direction)

    # the library's blocking calls on the stencil: (seconds at 8 B, at 64 KiB, Pattern) per family
    library = {family: (stencil[("native", family, "blocking", small)][0],
                        stencil[("native", family, "blocking", large)][0],
                        stencil[("native", family, "blocking", small)][1]) for family in FAMILIES}
    # the library's persistent alltoall just within and just past its eager limit, where measured
    straddle = [stencil.get(("native", "alltoall", "persistent", block)) for block in eager_straddle()]

    def fit_beta(rendezvous: float) -> float:
        """beta: T(64 KiB) - T(8 B) = spread * (beta * bytes at the pair's level + copy_beta * bytes
        to self) + the rendezvous of every message to another rank (64 KiB is past every eager limit)."""
        spread = CLASS_BYTES[size_class(large)] - CLASS_BYTES[size_class(small)]
        betas = []
        for seconds, seconds_large, pattern in library.values():
            grown = seconds_large - seconds - rendezvous * messages_out(pattern)
            to_self = byte_costs(pattern, 0.0)
            betas.append((grown / spread - to_self) / (byte_costs(pattern, 1.0) - to_self))
        return max(sum(betas) / len(betas), 0.0)

    def fit_rendezvous(beta: float) -> float:
        """Per message to another rank: T(just past the limit) - T(just within) less the bytes' cost."""
        if None in straddle or not messages_out(straddle[0][1]):
            return 0.0
        (within, pattern), (past, _) = straddle
        return max((past - within - STRADDLE_BYTES * byte_costs(pattern, beta)) / messages_out(pattern), 0.0)

    rendezvous = 0.0
    for _ in range(5):  # each depends on the other, a little: a few rounds settle both
        beta = fit_beta(rendezvous)
        rendezvous = fit_rendezvous(beta)
    beta = fit_beta(rendezvous)
    one_edge = times[("native", "blocking", 1, small)]
    per_message = []  # the stencil's bytes as the model charges them: at the size class's middle
    for seconds, _, pattern in library.values():
        count = sum(len(step.sends) + len(step.recvs) for step in pattern.steps)
        stencil_bytes = byte_costs(pattern, beta) * CLASS_BYTES[size_class(small)]
        per_message.append((seconds - one_edge - (stencil_bytes - 2 * small * beta)) / (count - 2))
    overhead = max(sum(per_message) / len(per_message), 0.0)
    alpha = max(one_way - 2 * overhead - small * beta, 0.0)
    one_message = alpha + 2 * (overhead + small * beta)
    native = {form: max(times[("native", form, 1, small)] - one_message, 0.0) for form in FORMS}
    ours = {form: max(times[("direct", form, 1, small)] - one_message, 0.0) for form in FORMS}
    measured = {"alpha": alpha, "beta": beta, "overhead": overhead, "rendezvous": rendezvous}
    levels = {"self": {"alpha": 0.0, "beta": copy_beta, "overhead": overhead, "rendezvous": 0.0}}
    position = LEVELS.index(pair_level)
    for i, level in enumerate(LEVELS[1:], start=1):
        if i <= position:
            levels[level] = dict(measured)
        else:
            levels[level] = {name: max(value, base.levels[level][name]) for name, value in measured.items()}
    load = Load(ranks_per_core, levels, ours, 0.0, native, 1.0)

    # the stencil's receive blocks, as the library's pattern receives them (one message per edge):
    # sparsecoll's schedules are charged the final copies of the blocks no arrival fills, as
    # auto charges them (:func:`~sparsecoll.model.choice.candidate_cost`)
    receive_items = {family: [item for step in pattern.steps for message in step.recvs for item in message.items]
                     for family, (_, _, pattern) in library.items()}

    def gap(algorithm: str, reference: str, family: str, form: str, block: int, fitted: Load) -> tuple:
        """Measured minus predicted difference ``algorithm - reference`` and the two predicted Costs."""
        f, c = FORMS.index(form), size_class(block)
        costs = [pattern_cost(stencil[(name, family, form, block)][1], fitted, native=name == "native",
                              recv_items=None if name == "native" else receive_items[family])
                 for name in (algorithm, reference)]
        predicted = costs[0].seconds()[f, c] - costs[1].seconds()[f, c]
        measured_gap = stencil[(algorithm, family, form, block)][0] - stencil[(reference, family, form, block)][0]
        return measured_gap - predicted, costs

    def fit_byte_factor(family: str) -> float:
        """``byte_factor``: direct - native at 64 KiB less the same at 8 B, less the model's, per byte
        direct moves, over ``beta``'s cost. The same messages: the per-call costs cancel, so it is
        fitted before them (the 8 B calls hold a few bytes too). 1 where direct sends to itself (a
        grid dimension of 1: 2 ranks): there the gap holds its messages to self, which the
        library copies (Open MPI, 2 ranks: a factor of 1.70 fitted so, while ``direct``'s 64 KiB
        calls of 8 edges to the other rank ran at 0.74-0.81 x the library's)."""
        pattern = stencil[("direct", family, "blocking", large)][1]
        if any(message.peer == pattern.rank for step in pattern.steps for message in step.sends):
            return 1.0
        missing_small, costs = gap("direct", "native", family, "blocking", small, load)
        missing_large, _ = gap("direct", "native", family, "blocking", large, load)
        spread = costs[0].per_byte * (CLASS_BYTES[size_class(large)] - CLASS_BYTES[size_class(small)])
        extra = (missing_large - missing_small) / spread if spread > 0 else 0.0
        return min(max(1.0 + extra, 1.0), 100.0)
    load = replace(load, sparsecoll_byte_factor={family: fit_byte_factor(family) for family in FAMILIES})

    for form in ("blocking", "persistent"):
        missing = max(gap("direct", "native", family, form, small, load)[0] for family in FAMILIES)
        ours[form] = max(ours[form] + max(missing, 0.0), 0.0)  # never below what one edge shows
    load = replace(load, sparsecoll_per_call=dict(ours))

    def fit_steps(load: Load) -> Load:
        """``load`` with ``per_step`` and ``combined_factor`` fitted: cartesian - direct at 8 B and
        64 KiB, extra steps and combined bytes, solved together per family."""
        per_step, factors, observed = 0.0, {}, False
        for family in FAMILIES:
            missing_small, costs = gap("cartesian", "direct", family, "blocking", small, load)
            missing_large, _ = gap("cartesian", "direct", family, "blocking", large, load)
            extra_steps = costs[0].steps - costs[1].steps
            pattern = stencil[("cartesian", family, "blocking", large)][1]
            combined_items = sum(len(m.items) for step in pattern.steps for direction in (step.sends, step.recvs)
                                 for m in direction if len(m.items) > 1)
            per_byte = combined_items * levels[pair_level]["beta"] * load.sparsecoll_byte_factor[family]
            spread = per_byte * (CLASS_BYTES[size_class(large)] - CLASS_BYTES[size_class(small)])
            extra_factor = (missing_large - missing_small) / spread if spread > 0 else 0.0
            if extra_steps > 0:
                observed = True
                per_step = max(per_step, (missing_small - per_byte * CLASS_BYTES[size_class(small)] * extra_factor)
                               / extra_steps)
            factors[family] = min(max(1.0 + extra_factor, 1.0), 100.0)
        # the per-call costs fitted so far hold direct's one step: charge it as a step from now on;
        # a stencil on which cartesian takes no more steps than direct (2 ranks: a dimension of 1)
        # cannot show the cost of a step, so base's stands (0 would make every extra step free)
        per_step = max(per_step, 0.0) if observed else base.sparsecoll_per_step
        return replace(load, sparsecoll_per_step=per_step, combined_factor=factors,
                       sparsecoll_per_call={form: max(cost - per_step, 0.0) for form, cost in ours.items()})

    def with_step_wait(load: Load, seconds: float) -> Load:
        """``load`` with ``rendezvous_step`` at ``seconds`` on every level but ``self``."""
        return replace(load, levels={level: {**values, "rendezvous_step": 0.0 if level == "self" else seconds}
                                     for level, values in load.levels.items()})

    def fit_step_wait(load: Load) -> float:
        """``rendezvous_step``: cartesian - direct just past the eager limit (persistent alltoall)
        less the model's gap, per step that waits for a handshake beyond direct's."""
        past = eager_straddle()[1]
        if not all((name, "alltoall", "persistent", past) in stencil for name in ("cartesian", "direct")):
            return 0.0
        missing, _ = gap("cartesian", "direct", "alltoall", "persistent", past, with_step_wait(load, 0.0))
        unit = missing - gap("cartesian", "direct", "alltoall", "persistent", past, with_step_wait(load, 1.0))[0]
        return max(missing / unit, 0.0) if unit > 0 else 0.0

    step_wait = 0.0
    for _ in range(5):  # the 64 KiB gap holds the step waits too: a few rounds settle both
        unfitted = replace(load, sparsecoll_per_step=0.0, sparsecoll_per_call=dict(ours),
                           combined_factor=dict.fromkeys(FAMILIES, 1.0))
        load = fit_steps(with_step_wait(unfitted, step_wait))
        step_wait = fit_step_wait(load)
    load = with_step_wait(load, step_wait)
    through = stencil.get(("shortcut", "allgather", "blocking", small))
    shortcut = max(through[0] - stencil[("native", "allgather", "blocking", small)][0], 0.0) if through else 0.0
    return replace(load, rma=fit_rma(stencil, load), native_shortcut=shortcut)


def fit_rma(stencil: dict, load) -> dict | None:
    """The profile's ``rma`` costs from ``direct`` persistent alltoall on the stencil, RMA executor
    (``"direct[rma]"``) against the step executor at 8 B and 64 KiB (None if not measured).

    With ``m`` the messages a rank sends (as many received) and ``B`` the model's per-byte cost of
    the schedule, the difference is ``2 m per_message + (byte_factor - 1) B bytes``: two sizes,
    two unknowns (``byte_factor`` kept within 0.01-100; ``per_message`` is a difference, of
    either sign).
    """
    from .choice import CLASS_BYTES, pattern_cost, size_class

    small, large = PROFILE_SMALL, PROFILE_LARGE
    keys = [(name, "alltoall", "persistent", block) for name in ("direct[rma]", "direct[steps]")
            for block in (small, large)]
    if not all(key in stencil for key in keys):
        return None
    pattern = stencil[("direct[steps]", "alltoall", "persistent", small)][1]
    cost = pattern_cost(pattern, load)
    gaps = [stencil[("direct[rma]", "alltoall", "persistent", block)][0]
            - stencil[("direct[steps]", "alltoall", "persistent", block)][0] for block in (small, large)]
    spread = cost.per_byte * (CLASS_BYTES[size_class(large)] - CLASS_BYTES[size_class(small)])
    factor = min(max(1.0 + (gaps[1] - gaps[0]) / spread, 0.01), 100.0) if spread > 0 else 1.0
    small_bytes = CLASS_BYTES[size_class(small)]
    per_message = (gaps[0] - (factor - 1.0) * cost.per_byte * small_bytes) / max(2 * cost.messages, 1)
    return {"per_message": per_message, "byte_factor": factor}
