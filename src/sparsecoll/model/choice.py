"""The choice of ``algorithm="auto"``: which registered algorithm runs a collective family.

Decided from the Topology and the wrapper's options alone, so every rank decides the same
(Cartesian neighborhoods share their offsets; other topologies take the same branch on every
rank). Isomorphic (Cartesian) neighborhoods: the Hockney model of Träff and Hunold (ICPP 2019,
section 3.1) decides between message combining and one message per neighbor
(:func:`sparsecoll.algorithms.cartesian.auto_choice`); other topologies run ``direct``.
"""

from __future__ import annotations

from ..algorithms import cartesian


def explain_choice(topology, family: str, options: dict) -> dict:
    """The choice of ``"auto"`` with its reasons (``plan_stats`` reports it under ``"auto"``)."""
    if cartesian.unsupported(topology) is None:
        return cartesian.auto_choice(topology, family, options)
    return {"algorithm": "direct"}


def choose(topology, family: str, options: dict) -> str:
    """The algorithm ``"auto"`` runs for this topology and family."""
    return explain_choice(topology, family, options)["algorithm"]
