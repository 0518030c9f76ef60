"""Cost models: Hockney and LogGP over whole Pattern sets, and the 2023 paper's eqs. 1-8.

* :mod:`.params`: machine parameters per pair class, placement, parameter files;
* :mod:`.evaluate`: per-step evaluation of all ranks' Patterns (single port, optional
  per-node injection serialization);
* :mod:`.paper2023`: eqs. 1-8 of Sharifian, Sojoodi and Afsahi (2023), §V;
* :mod:`.calibrate`: the ping-pong and burst measurements and fits behind ``sparsecoll calibrate``;
* :mod:`.choice`: what ``algorithm="auto"`` runs.

The package itself imports none of them, so that :mod:`.calibrate` (numpy only) loads
without an MPI library; import from the submodules.
"""
