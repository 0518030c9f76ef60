"""Cost models: Hockney and LogGP over whole Pattern sets, and the 2023 paper's eqs. 1-8.

* :mod:`.params`: machine parameters per pair class, placement, parameter files;
* :mod:`.evaluate`: evaluation of all ranks' Patterns, step by step or as a DAG (single port,
  optional per-node injection serialization);
* :mod:`.profile`: the calibrated profiles ``auto`` chooses by (per host and MPI library), read
  and checked;
* :mod:`.paper2023`: eqs. 1-8 of Sharifian, Sojoodi and Afsahi (2023), §V;
* :mod:`.calibrate`: the ping-pong and burst measurements and fits behind ``sparsecoll calibrate``;
* :mod:`.choice`: what ``algorithm="auto"`` runs;
* :mod:`.hierarchy`: the universal hierarchical collectives and dynamic-leader reductions under
  imbalanced arrival, against MPICH's algorithms (``benchmarks/hierarchy/simulate.py``).

The package itself imports none of them, so that :mod:`.calibrate` (numpy only) loads
without an MPI library; import from the submodules.
"""
