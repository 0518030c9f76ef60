"""The benchmark: workloads (:mod:`.workloads`), measurement (:mod:`.runner`), reports
(:mod:`.report`) and the ``sparsecoll bench`` command (:mod:`.command`)."""

#: The bench's call modes (:mod:`.runner` measures them; :mod:`.command` checks ``--mode``).
MODES = ("persistent", "nonpersistent", "blocking", "nonblocking")
