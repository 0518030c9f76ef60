"""The benchmark: workloads (:mod:`.workloads`), measurement (:mod:`.runner`), reports
(:mod:`.report`) and the ``sparsecoll bench`` command (:mod:`.command`)."""
