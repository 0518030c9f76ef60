"""Tools around the library, outside its layers: the ``sparsecoll`` command line
(:mod:`.cli`) and its subcommands (:mod:`.bench`, :mod:`.demo`, :mod:`.calibrate`,
:mod:`.simulate`, :mod:`.cartesian_table`), and the MPI launcher (:mod:`.launch`) that
they and the test suite use. Tools import the library's public API; nothing in the
library imports them.
"""
