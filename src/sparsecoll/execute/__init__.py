"""Executors run bound Schedules; :mod:`.p2p` is the default (persistent point-to-point)."""
