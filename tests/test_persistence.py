"""The persistence levels' pure parts: parsing info keys, the level, plan keys, what plan_stats says."""

from __future__ import annotations

import numpy
import pytest
from mpi4py import MPI

from sparsecoll.runtime import persistence
from sparsecoll.runtime.persistence import EXACT_BYTES, KEYS, STATIC_BUFFERS, STRICT, Persistence
from sparsecoll.runtime.plan import make_plan
from sparsecoll.topology import graph_topology


def _info(pairs: dict) -> MPI.Info:
    info = MPI.Info.Create()
    for key, value in pairs.items():
        info.Set(key, value)
    return info


@pytest.mark.parametrize("value, flag", [("true", True), ("TRUE", True), (" False ", False), ("fAlSe", False),
                                         (True, True), (False, False), (numpy.bool_(True), True)])
def test_a_dict_value_is_a_case_insensitive_string_or_a_bool(value, flag):
    assert persistence.parse({STRICT: value}) == {STRICT: flag}


def test_an_mpi_info_gives_the_same_level_as_a_dict():
    pairs = {STRICT: "true", EXACT_BYTES: "False", STATIC_BUFFERS: "TRUE"}
    info = _info(pairs)
    try:
        assert persistence.parse(info) == persistence.parse(pairs) == {STRICT: True, EXACT_BYTES: False,
                                                                        STATIC_BUFFERS: True}
    finally:
        info.Free()
    assert persistence.parse(MPI.INFO_NULL) == persistence.parse(None) == persistence.parse({}) == {}


def test_unknown_keys_are_ignored():
    info = _info({"cdag_no_such_key": "maybe", "mpi_assert_no_any_tag": "true", STATIC_BUFFERS: "true"})
    try:
        assert persistence.parse(info) == {STATIC_BUFFERS: True}
    finally:
        info.Free()
    assert persistence.parse({"cdag_no_such_key": object(), 7: "x"}) == {}


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("value", ["yes", "1", "", 1, None, "true!"])
def test_a_bad_value_raises_naming_the_key(key, value):
    with pytest.raises(ValueError, match=key):
        persistence.parse({key: value})
    if isinstance(value, str):
        info = _info({key: value}) if value else None
        if info is not None:
            try:
                with pytest.raises(ValueError, match=key):
                    persistence.parse(info)
            finally:
                info.Free()


@pytest.mark.parametrize("info", ["cdag_strict_communication=true", [(STRICT, "true")], 3])
def test_a_wrong_type_raises_naming_info(info):
    with pytest.raises(TypeError, match="info"):
        persistence.parse(info)


def test_the_explicit_info_wins_per_key_over_the_communicators():
    comm = MPI.COMM_SELF.Dup()
    try:
        comm.Set_info(_kept := _info({STRICT: "true", STATIC_BUFFERS: "true"}))
        _kept.Free()
        kept = persistence.from_comm(comm)
        level = persistence.level({STATIC_BUFFERS: "false", EXACT_BYTES: True}, comm)
        assert level.exact_bytes and not level.static_buffers
        # The library may drop keys it does not know (MPICH does): only what it kept counts.
        assert level.strict == kept.get(STRICT, False)
    finally:
        comm.Free()
    assert persistence.level() == persistence.NONE == Persistence(False, False, False)


def test_the_level_lists_its_keys_in_order():
    assert Persistence(True, False, True).keys() == [STRICT, STATIC_BUFFERS]
    assert persistence.NONE.keys() == []


def test_only_exact_bytes_changes_the_plan_key():
    plain = make_plan("direct", {}, False, 4)
    assert plain.persistence == persistence.NONE
    strict = make_plan("direct", {}, False, 4, persistence=Persistence(strict=True, static_buffers=True))
    exact = make_plan("direct", {}, False, 4, persistence=Persistence(exact_bytes=True))
    assert strict.key == plain.key  # no message changes
    assert exact.key != plain.key  # auto's choice and the per-call check change
    assert exact.resolved("native").persistence == exact.persistence


def test_exact_bytes_fill_the_block_size_a_build_assumes():
    level = Persistence(exact_bytes=True)
    tree = make_plan("loggp_tree", {}, False, 4, persistence=level)
    assert tree.sized(64, {}).options["block_bytes"] == 64
    assert tree.sized(64, {}).key != tree.key
    given = make_plan("loggp_tree", {"block_bytes": 8}, False, 4, persistence=level)
    assert given.sized(64, {"block_bytes": 8}).options["block_bytes"] == 8  # the user's option wins
    assert tree.sized(None, {}) is tree and tree.sized(0, {}) is tree  # no weights / empty blocks
    direct = make_plan("direct", {}, False, 4, persistence=level)
    assert direct.sized(64, {}) is direct  # no block-size option to fill


def test_weighted_topologies_and_the_weights_auto_classes():
    weighted = graph_topology(0, 2, [1], [1, 1], source_weights=[8], dest_weights=[16, 32])
    unweighted = graph_topology(0, 2, [1], [1])
    lonely = graph_topology(0, 2, [], [])
    assert persistence.is_weighted(weighted) and persistence.is_weighted(lonely)
    assert not persistence.is_weighted(unweighted)
    assert persistence.weight_bytes(weighted) == 24  # mean out-edge weight
    assert persistence.weight_bytes(graph_topology(0, 2, [1], [], source_weights=[8], dest_weights=[])) == 8
    assert persistence.weight_bytes(lonely) is None


def test_what_each_level_enables_is_said():
    everything = Persistence(True, True, True)
    notes = persistence.enabled(everything, native=False, auto=False, strict_built=("allgather", "alltoall"),
                                block_bytes=64)
    assert [note.split(":")[0] for note in notes] == [STRICT, EXACT_BYTES, EXACT_BYTES, STATIC_BUFFERS]
    assert "allgather, alltoall" in notes[0] and "64 bytes" in notes[2]
    auto_notes = persistence.enabled(everything, native=False, auto=True, auto_class=3)
    assert any("auto chooses" in note and "size class 3" in note for note in auto_notes)
    assert persistence.enabled(persistence.NONE, native=True, auto=False) == []
