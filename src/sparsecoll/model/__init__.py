"""Cost models: Hockney and LogGP over whole Pattern sets, and the 2023 paper's eqs. 1-8.

* :mod:`.params`: machine parameters per pair class, placement, parameter files;
* :mod:`.evaluate`: per-step evaluation of all ranks' Patterns (single port, optional
  per-node injection serialization);
* :mod:`.paper2023`: eqs. 1-8 of Sharifian, Sojoodi and Afsahi (2023), §V;
* :mod:`.calibrate`: the ping-pong and burst measurements and fits behind ``sparsecoll calibrate``.
"""

from .evaluate import CompiledPatterns, Prediction, evaluate, predict
from .params import CLASSES, Machine, Placement, hockney, loggp

__all__ = ["CompiledPatterns", "Prediction", "evaluate", "predict", "Machine", "Placement",
           "hockney", "loggp", "CLASSES"]
