"""The performance model of Sharifian, Sojoodi and Afsahi (2023), §V, eqs. 1-8, as written.

Distance halving (DH) against the naive neighborhood allgather on an Erdős–Rényi graph of
density ``delta`` over ``n`` ranks, ``L`` ranks per socket, ``S`` sockets per node,
Hockney costs. ``log`` is base 2 (halving) and rounded up, as in the paper. The paper
writes ``m / beta`` with ``beta`` a bandwidth; these functions take ``beta`` in seconds per
byte, as :mod:`sparsecoll.model.params` does, so its ``m / beta`` is ``m * beta`` here.

The paper's worked example (§V-A: n = 2000 on 50 nodes of 40 cores in two sockets,
so L = 20, S = 2, delta = 0.3) quotes 7 off-socket and 16 intra-socket messages per rank
for DH against 600 for naive. The equations as printed give
``halving_steps = ceil(log2(100)) + 1 = 8``, eq. 1: ``min(8, 594) = 8``, eq. 2:
``20 * (1 - 0.7**9) = 19.19``, and ``delta * n = 600``; :func:`worked_example` returns
these. The quoted 7 equals ``ceil(log2(n/L))``, the number of halvings that leave at most
``L`` ranks (the bound of 27 = 7 + 20 messages the paper gives for large delta agrees);
no reading of eq. 2 gives 16 at delta = 0.3 with L = 20.
"""

from __future__ import annotations

import math


def halving_steps(n: int, L: int) -> int:
    """``ceil(log2(n / L)) + 1``: the halving-step count eqs. 1 and 2 use."""
    if n < 1 or L < 1:
        raise ValueError(f"expected n >= 1 and L >= 1, got n={n}, L={L}")
    return math.ceil(math.log2(n / L)) + 1 if n > L else 1


def halvings(n: int, L: int) -> int:
    """Halvings until at most ``L`` ranks remain: ``ceil(log2(n / L))`` (0 when ``n <= L``)."""
    if n < 1 or L < 1:
        raise ValueError(f"expected n >= 1 and L >= 1, got n={n}, L={L}")
    return math.ceil(math.log2(n / L)) if n > L else 0


def n_off(n: int, L: int, delta: float) -> float:
    """Eq. 1: expected off-socket messages per rank, ``min(ceil(log2(n/L)) + 1, delta (n - L))``."""
    return min(halving_steps(n, L), delta * (n - L))


def n_in(n: int, L: int, delta: float) -> float:
    """Eq. 2: expected intra-socket messages per rank, ``(1 - (1 - delta)^(ceil(log2(n/L)) + 2)) L``."""
    return (1.0 - (1.0 - delta) ** (halving_steps(n, L) + 1)) * L


def m_in(n: int, L: int, delta: float, m: float) -> float:
    """Eq. 3: expected intra-socket message size, ``delta E[n_in] m``."""
    return delta * n_in(n, L, delta) * m


def naive_messages(n: int, delta: float) -> float:
    """Messages one rank sends in the naive algorithm: ``delta n``."""
    return delta * n


def t_rank_naive(n: int, delta: float, m: float, alpha: float, beta: float) -> float:
    """Eq. 4: ``2 delta n (alpha + m beta)`` (send and receive on one port)."""
    return 2.0 * delta * n * (alpha + m * beta)


def t_naive(n: int, L: int, S: int, delta: float, m: float, alpha: float, beta: float) -> float:
    """Eq. 5: ``S L E[t_r(naive)]`` (the node's ranks serialized on its port)."""
    return S * L * t_rank_naive(n, delta, m, alpha, beta)


def t_off_dh(n: int, L: int, delta: float, m: float, alpha: float, beta: float) -> float:
    """Eq. 6: ``E[n_off] alpha + (2^(E[n_off] + 1) - 1) m beta`` (sizes doubling per step)."""
    k = n_off(n, L, delta)
    return k * alpha + (2.0 ** (k + 1) - 1.0) * m * beta


def t_in_dh(n: int, L: int, delta: float, m: float, alpha: float, beta: float) -> float:
    """Eq. 7: ``E[n_in] (alpha + E[m_in] beta)``."""
    return n_in(n, L, delta) * (alpha + m_in(n, L, delta, m) * beta)


def t_dh(n: int, L: int, S: int, delta: float, m: float, alpha: float, beta: float) -> float:
    """Eq. 8: ``2 S L (E[t_off(DH)] + E[t_in(DH)])``."""
    return 2.0 * S * L * (t_off_dh(n, L, delta, m, alpha, beta) + t_in_dh(n, L, delta, m, alpha, beta))


def worked_example(alpha: float = 1.0, beta: float = 0.0, m: float = 4.0) -> dict:
    """Eqs. 1-8 at the paper's example: n = 2000, L = 20, S = 2, delta = 0.3."""
    n, L, S, delta = 2000, 20, 2, 0.3
    return {
        "n": n, "L": L, "S": S, "delta": delta,
        "halvings": halvings(n, L),
        "halving_steps": halving_steps(n, L),
        "n_off": n_off(n, L, delta),
        "n_in": n_in(n, L, delta),
        "m_in": m_in(n, L, delta, m),
        "naive_messages": naive_messages(n, delta),
        "t_rank_naive": t_rank_naive(n, delta, m, alpha, beta),
        "t_naive": t_naive(n, L, S, delta, m, alpha, beta),
        "t_off_dh": t_off_dh(n, L, delta, m, alpha, beta),
        "t_in_dh": t_in_dh(n, L, delta, m, alpha, beta),
        "t_dh": t_dh(n, L, S, delta, m, alpha, beta),
    }
