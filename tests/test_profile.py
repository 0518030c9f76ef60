"""auto's profiles: round trip, the clear errors of bad files, resolution order, and the model's decision."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy
import pytest

from sparsecoll.model import choice
from sparsecoll.model.profile import BUILTIN, ENVIRONMENT, Profile, ProfileError, check_library, resolve


def write(tmp_path, data, name="profile.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def builtin_json():
    return json.loads(json.dumps(BUILTIN.to_json()))


def test_a_profile_file_round_trips(tmp_path):
    original = Profile(BUILTIN.loads, "MPICH 5.0", "host-a", "unit test")
    path = tmp_path / "sub" / "p.json"
    original.save(path)
    loaded = Profile.load(path)
    assert loaded == original
    assert loaded.path == str(path)
    replaced = Profile(BUILTIN.loads, "MPICH 5.0", "host-a", "second calibration")
    replaced.save(path)  # written whole beside the file, then renamed over it: nothing else left
    assert Profile.load(path) == replaced and sorted(p.name for p in path.parent.iterdir()) == ["p.json"]


def test_a_saved_profile_is_readable_as_any_new_file_of_its_user_is(tmp_path):
    """calibrate writes the profile beside its path, then renames it over it: the file so made had
    mode 0600 whatever the umask, so a profile written with ``--out`` to a place others read it
    from (``SPARSECOLL_PROFILE`` naming a shared file) could not be read by other users. It now has
    the mode ``open()`` gives a new file (0644 under umask 022)."""
    import os
    import stat
    path = tmp_path / "shared.json"
    old = os.umask(0o022)
    try:
        BUILTIN.save(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
        os.umask(0o077)
        BUILTIN.save(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json"]


def test_builtin_names_the_built_in_profile_as_the_environment_variable_does():
    assert resolve("builtin") is BUILTIN


def test_profiles_written_before_the_rendezvous_costs_read_them_as_0(tmp_path):
    """``rendezvous`` and ``rendezvous_step`` are optional: a level without them costs no handshake."""
    data = builtin_json()
    for load in data["loads"]:
        for values in load["levels"].values():
            values.pop("rendezvous")
            values.pop("rendezvous_step")
    data["loads"][1]["levels"]["socket"]["rendezvous"] = 3e-6
    loaded = Profile.load(write(tmp_path, data))
    assert loaded.loads[1].levels["socket"] == {**BUILTIN.loads[1].levels["socket"], "rendezvous": 3e-6}
    assert loaded.loads[0].levels["node"]["rendezvous"] == loaded.loads[0].levels["node"]["rendezvous_step"] == 0.0


def test_one_combined_or_byte_factor_stands_for_both_families(tmp_path):
    """A profile may give ``combined_factor`` and ``byte_factor`` as one number (both families) or
    one per family; a profile without ``byte_factor`` or ``native.shortcut`` (written before they
    were measured) reads them as 1 and 0."""
    data = builtin_json()
    data["loads"][1]["sparsecoll"]["combined_factor"] = 3
    data["loads"][0]["sparsecoll"]["combined_factor"] = {"allgather": 1.25, "alltoall": 2.5}
    data["loads"][1]["sparsecoll"]["byte_factor"] = 1.5
    data["loads"][0]["sparsecoll"].pop("byte_factor")
    data["loads"][0]["native"].pop("shortcut")
    loaded = Profile.load(write(tmp_path, data))
    assert loaded.loads[1].combined_factor == {"allgather": 3.0, "alltoall": 3.0}
    assert loaded.loads[0].combined_factor == {"allgather": 1.25, "alltoall": 2.5}
    assert loaded.loads[1].sparsecoll_byte_factor == {"allgather": 1.5, "alltoall": 1.5}
    assert loaded.loads[0].sparsecoll_byte_factor == {"allgather": 1.0, "alltoall": 1.0}
    assert loaded.loads[0].native_shortcut == 0.0
    assert loaded.loads[1].native_shortcut == BUILTIN.loads[1].native_shortcut


@pytest.mark.parametrize("edit, key", [
    (lambda d: d["loads"][0]["levels"].pop("socket"), "loads[0].levels.socket"),
    (lambda d: d["loads"][0]["native"]["per_call"].pop("persistent"), "loads[0].native.per_call.persistent"),
    (lambda d: d["loads"][0]["sparsecoll"].pop("per_step"), "loads[0].sparsecoll.per_step"),
    (lambda d: d["loads"][0]["levels"]["node"].__setitem__("beta", -1e-9), "loads[0].levels.node.beta"),
    (lambda d: d["loads"][0]["levels"]["self"].__setitem__("alpha", "fast"), "loads[0].levels.self.alpha"),
    (lambda d: d["loads"][0]["sparsecoll"]["per_call"].__setitem__("blocking", float("nan")),
     "loads[0].sparsecoll.per_call.blocking"),
    (lambda d: d["loads"][0].__setitem__("ranks_per_core", 0), "loads[0].ranks_per_core"),
    (lambda d: d["loads"][0].__setitem__("ranks_per_node", 0), "loads[0].ranks_per_node"),
    (lambda d: d["loads"][0].__setitem__("ranks_per_node", 2.5), "loads[0].ranks_per_node"),
    (lambda d: d["loads"][1].__setitem__("ranks_per_node", "eight"), "loads[1].ranks_per_node"),
    (lambda d: d.__setitem__("loads", []), "loads"),
    (lambda d: d.__setitem__("format", 99), "format"),
    (lambda d: d.__setitem__("format", True), "format"),
    (lambda d: d.__setitem__("host", 5), "host"),
    (lambda d: d.__setitem__("source", ["x"]), "source"),
    (lambda d: d.__setitem__("mpi_library", 5.0), "mpi_library"),
    (lambda d: d["loads"][0]["rma"].__setitem__("byte_factor", 0), "loads[0].rma.byte_factor"),
    (lambda d: d["loads"][0]["rma"].__setitem__("byte_factor", -2.0), "loads[0].rma.byte_factor"),
    (lambda d: d["loads"][0]["rma"].__setitem__("per_message", "cheap"), "loads[0].rma.per_message"),
    (lambda d: d["loads"][0]["rma"].pop("per_message"), "loads[0].rma.per_message"),
    (lambda d: d["loads"][0]["sparsecoll"].__setitem__("combined_factor", 0.5), "loads[0].sparsecoll.combined_factor"),
    (lambda d: d["loads"][0]["sparsecoll"]["combined_factor"].pop("alltoall"),
     "loads[0].sparsecoll.combined_factor.alltoall"),
    (lambda d: d["loads"][0]["sparsecoll"]["combined_factor"].__setitem__("allgather", 0.9),
     "loads[0].sparsecoll.combined_factor.allgather"),
    (lambda d: d["loads"][0]["sparsecoll"].__setitem__("byte_factor", 0.8), "loads[0].sparsecoll.byte_factor"),
    (lambda d: d["loads"][1]["native"].__setitem__("shortcut", -1e-6), "loads[1].native.shortcut"),
    (lambda d: d["loads"][1]["native"].__setitem__("shortcut", "cheap"), "loads[1].native.shortcut"),
    (lambda d: d["loads"][0]["sparsecoll"]["byte_factor"].pop("allgather"),
     "loads[0].sparsecoll.byte_factor.allgather"),
    (lambda d: d["loads"][0]["sparsecoll"]["byte_factor"].__setitem__("alltoall", "x"),
     "loads[0].sparsecoll.byte_factor.alltoall"),
    (lambda d: d["loads"][1]["levels"]["socket"].__setitem__("rendezvous", -1e-6), "loads[1].levels.socket.rendezvous"),
    (lambda d: d["loads"][0]["levels"]["node"].__setitem__("rendezvous_step", "slow"),
     "loads[0].levels.node.rendezvous_step"),
    (lambda d: d["loads"][0]["levels"]["socket"].__setitem__("beta", 1e308), "loads[0].levels.socket.beta"),
    (lambda d: d["loads"][0].__setitem__("ranks_per_node", 10 ** 400), "loads[0].ranks_per_node"),
    (lambda d: d["loads"][0]["native"]["per_call"].__setitem__("blocking", 10 ** 400),
     "loads[0].native.per_call.blocking"),
    # a misspelt optional key would leave its default (0) in force silently
    (lambda d: d["loads"][1]["levels"]["socket"].__setitem__("rendevous", 9e-6), "loads[1].levels.socket.rendevous"),
    (lambda d: d["loads"][0]["native"].__setitem__("shortcuts", 1e-6), "loads[0].native.shortcuts"),
    (lambda d: d["loads"][0]["sparsecoll"].__setitem__("bytes_factor", 2.0), "loads[0].sparsecoll.bytes_factor"),
    (lambda d: d["loads"][0]["sparsecoll"]["combined_factor"].__setitem__("allgatherv", 2.0),
     "loads[0].sparsecoll.combined_factor.allgatherv"),
    (lambda d: d["loads"][0]["sparsecoll"]["per_call"].__setitem__("nonblocking_", 1e-6),
     "loads[0].sparsecoll.per_call.nonblocking_"),
    (lambda d: d["loads"][0]["levels"].__setitem__("numa", d["loads"][0]["levels"]["node"]), "loads[0].levels.numa"),
    (lambda d: d["loads"][0]["rma"].__setitem__("per_byte", 1e-9), "loads[0].rma.per_byte"),
    (lambda d: d["loads"][0].__setitem__("ranks_per_nodes", 8), "loads[0].ranks_per_nodes"),
    (lambda d: d.__setitem__("mpi_libary", "MPICH 5.0"), "mpi_libary"),
    # two loads measured alike: the nearest-load rule would take the first silently
    (lambda d: d["loads"].append(dict(d["loads"][0])), "loads[2]"),
])
def test_bad_profiles_name_the_file_and_the_key(tmp_path, edit, key):
    data = builtin_json()
    edit(data)
    path = write(tmp_path, data)
    with pytest.raises(ProfileError) as caught:
        Profile.load(path)
    assert path in str(caught.value) and repr(key) in str(caught.value)


def test_a_profile_of_another_library_is_refused(tmp_path):
    data = builtin_json()
    data["mpi_library"] = "Open MPI 5.0"
    path = write(tmp_path, data)
    with pytest.raises(ProfileError, match="mpi_library") as caught:
        check_library(Profile.load(path), "MPICH 5.0")
    assert path in str(caught.value)
    assert check_library(Profile.load(path), "Open MPI 4.1").mpi_library == "Open MPI 5.0"  # versions may differ
    data["mpi_library"] = "MPICH"  # a library named without its version is that library
    assert check_library(Profile.load(write(tmp_path, data)), "MPICH 5.0").mpi_library == "MPICH"
    with pytest.raises(ProfileError, match="'MPICH'"):
        check_library(Profile.load(write(tmp_path, data)), "Open MPI 5.0")


def test_a_parameter_file_given_as_a_profile_says_what_it_is(tmp_path):
    from sparsecoll.model.params import hockney
    path = write(tmp_path, hockney(2e-6, 1e-9, source="calibrate --model hockney").to_json())
    with pytest.raises(ProfileError, match="parameter file") as caught:
        Profile.load(path)
    assert path in str(caught.value)


def test_files_that_are_not_profiles(tmp_path):
    with pytest.raises(ProfileError, match="cannot read"):
        Profile.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ProfileError, match="not JSON"):
        Profile.load(bad)
    encoded = tmp_path / "utf16.json"
    encoded.write_text(json.dumps(builtin_json()), encoding="utf-16")
    with pytest.raises(ProfileError, match="not JSON") as caught:
        Profile.load(encoded)
    assert str(encoded) in str(caught.value)
    with pytest.raises(TypeError, match="profile"):
        resolve(42)
    with pytest.raises(ProfileError, match="profile: an empty path"):
        resolve("")


def test_resolution_order(tmp_path, monkeypatch):
    data = builtin_json()
    data["source"] = "from the environment"
    path = write(tmp_path, data)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    assert resolve() is BUILTIN
    monkeypatch.setenv(ENVIRONMENT, path)
    assert resolve().source == "from the environment"
    monkeypatch.setenv(ENVIRONMENT, "builtin")
    assert resolve() is BUILTIN
    explicit = Profile(BUILTIN.loads, source="explicit")
    assert resolve(explicit) is explicit


def test_the_nearest_load_is_used():
    light = BUILTIN.loads[0]
    heavy = type(light)(4.0, light.levels, light.sparsecoll_per_call, 50e-6, light.native_per_call)
    profile = BUILTIN.with_load(heavy)
    assert profile.load_for(1.0) is light and profile.load_for(3.0) is heavy and profile.load_for(0.5) is light


def test_native_wins_unless_a_candidate_is_clearly_faster():
    shape = (3, choice.CLASSES)
    seconds = {"native": numpy.full(shape, 10.0), "direct": numpy.full(shape, 9.5),
               "cartesian": numpy.full(shape, 20.0)}
    seconds["cartesian"][:, 3] = 5.0
    table = choice.decide(seconds)
    assert all(row[c] == "native" for row in table for c in range(choice.CLASSES) if c != 3)
    assert all(row[3] == "cartesian" for row in table)
    free = {"native": numpy.zeros(shape), "direct": numpy.zeros(shape)}  # a profile that charges nothing
    assert {name for row in choice.decide(free) for name in row} == {"native"}  # a tie goes to the library


def test_combining_is_charged_for_its_steps_and_wins_only_where_messages_dominate():
    from sparsecoll.algorithms.cartesian import combining_pattern
    from sparsecoll.algorithms.direct import direct_pattern
    from sparsecoll.topology.cartesian import Grid, offset_topology
    nine_point = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if (dx, dy) != (0, 0)]
    topology = offset_topology(Grid((4, 4), (True, True)), 5, nine_point)
    base = BUILTIN.loads[0]
    costly_messages = type(base)(1.0, {k: {**v, "overhead": 5e-6} for k, v in base.levels.items()},
                                 base.sparsecoll_per_call, 1e-6, base.native_per_call)
    combining = choice.pattern_cost(combining_pattern(topology, "alltoall"), costly_messages)
    direct = choice.pattern_cost(direct_pattern(topology, "alltoall"), costly_messages)
    assert (combining.steps, direct.steps) == (2, 1)
    assert combining.messages < direct.messages
    small, large = choice.size_class(8), choice.size_class(1 << 20)
    assert combining.seconds()[0, small] < direct.seconds()[0, small]
    assert combining.seconds()[0, large] > direct.seconds()[0, large]  # combining moves more bytes


def test_size_classes():
    assert [choice.size_class(n) for n in (0, 1, 2, 3, 4, 8, 65536)] == [0, 1, 2, 2, 3, 4, 17]
    assert choice.CLASS_BYTES[4] > 8 and choice.CLASS_BYTES[4] < 16


def test_messages_to_one_peer_are_charged_as_the_executor_sends_them():
    """direct's executor joins the messages of a step to one peer within the library's limits
    (:func:`sparsecoll.execute.p2p.wire_runs`); the library sends one per edge, and each message
    past the eager limit pays a rendezvous."""
    from sparsecoll.algorithms.direct import direct_pattern
    from sparsecoll.execute.p2p import wire_limits
    from sparsecoll.topology import graph_topology
    topology = graph_topology(0, 2, [1] * 4, [1] * 4)  # four edges each way, all to rank 1
    pattern = direct_pattern(topology, "alltoall")
    base = BUILTIN.loads[0]
    load = type(base)(1.0, {k: {**v, "rendezvous": 2e-6} for k, v in base.levels.items()},
                      base.sparsecoll_per_call, base.sparsecoll_per_step, base.native_per_call)
    overhead, rendezvous = load.levels["socket"]["overhead"], 2e-6
    ours = choice.pattern_cost(pattern, load)
    library = choice.pattern_cost(pattern, load, native=True)
    small, large = choice.size_class(8), choice.size_class(1 << 16)
    assert ours.by_class[small] == pytest.approx(2 * overhead)  # one send and one receive on the wire
    large_messages = 2 if wire_limits().join_any_size else 8  # joined where the library gains (Open MPI)
    assert ours.by_class[large] == pytest.approx(large_messages * (overhead + rendezvous))
    assert library.by_class[small] == pytest.approx(8 * overhead)
    assert library.by_class[large] == pytest.approx(8 * (overhead + rendezvous))


def test_an_estimate_pays_the_handshakes_its_messages_wait_for():
    """The estimates of the protocol candidates charge ``rendezvous`` per send and receive of a
    message past the eager limit and ``rendezvous_step`` for every step but one, as a built
    Pattern is charged; without them an estimated schedule looked cheaper than the library's
    call (which pays them) by every handshake: Open MPI, 8 ranks, Moore 4 KiB allgather,
    ``distance_halving`` estimated at 0.71 x the library's call, measured 1.25 x."""
    from sparsecoll.topology import graph_topology
    from sparsecoll.topology.cartesian import Grid, offset_topology
    moore = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if (dx, dy) != (0, 0)]
    stencil = offset_topology(Grid((4, 2), (True, True)), 5, moore)  # 8 edges to 5 distinct ranks
    dense = graph_topology(0, 16, list(range(1, 13)), list(range(1, 13)))  # common-neighbor rounds
    base = BUILTIN.loads[1]
    waiting = type(base)(base.ranks_per_core, {k: {**v, "rendezvous": 2e-6, "rendezvous_step": 7e-6}
                                               for k, v in base.levels.items()},
                         base.sparsecoll_per_call, base.sparsecoll_per_step, base.native_per_call)
    small, large = choice.size_class(8), choice.size_class(1 << 16)
    for estimate, topology in ((choice.estimate_distance_halving, stencil),
                               (choice.estimate_common_neighbor, dense)):
        without, with_waits = (estimate(topology, "allgather", {}, load, None) for load in (base, waiting))
        extra = numpy.subtract(with_waits.by_class, without.by_class)
        sends = (with_waits.by_class[large] - 7e-6 * (with_waits.steps - 1)) / (2 * 2e-6)
        assert extra[small] == 0.0
        assert extra[large] == pytest.approx(2 * sends * 2e-6 + 7e-6 * (with_waits.steps - 1))
        assert sends >= with_waits.messages - 0.5 and sends > 0
    assert choice.estimate_distance_halving(stencil, "allgather", {}, waiting, None).by_class[large] == (
        pytest.approx(2 * 5 * 2e-6))  # one step, a message each way per distinct rank


def test_a_mixed_row_is_kept_only_where_the_size_comparison_costs_little():
    """``keep_the_library_whole``: a blocking or nonblocking row that runs the library at some
    classes and another algorithm at others becomes the library's at every class where the
    comparison costs more than SHORTCUT_ALLOWANCE of the library's call at one of its classes;
    the persistent row (no comparison) and rows of one algorithm stay."""
    from sparsecoll.model.profile import FORMS
    native = numpy.full((len(FORMS), choice.CLASSES), 100e-6)
    native[:, 20:] = 1e-3
    mixed = [choice.NATIVE] * 20 + ["direct"] * (choice.CLASSES - 20)

    def table():
        return [list(mixed), list(mixed), list(mixed)]
    allowed = choice.SHORTCUT_ALLOWANCE * 100e-6
    kept = table()
    assert choice.keep_the_library_whole(kept, native, allowed) == [] and kept == table()
    whole = table()
    assert choice.keep_the_library_whole(whole, native, allowed * 1.01) == ["blocking", "nonblocking"]
    assert whole == [[choice.NATIVE] * choice.CLASSES] * 2 + [mixed]
    one_algorithm = [["direct"] * choice.CLASSES, [choice.NATIVE] * choice.CLASSES, list(mixed)]
    assert choice.keep_the_library_whole(one_algorithm, native, 1.0) == []
    assert one_algorithm == [["direct"] * choice.CLASSES, [choice.NATIVE] * choice.CLASSES, mixed]
    above = [["direct"] * 20 + [choice.NATIVE] * (choice.CLASSES - 20)] * 3  # the library's classes cost 1 ms
    under = 1e-3 * choice.SHORTCUT_ALLOWANCE * 0.98
    assert choice.keep_the_library_whole([list(row) for row in above], native, under) == []


def test_a_pinned_choice_must_be_safe_at_every_size():
    """``safe_at_every_size``: in the rows of the forms given, a candidate predicted over
    PINNED_ALLOWANCE x native's time at any class is charged infinity at every class (so
    ``decide`` keeps native where it won), one within the allowance everywhere is kept as it is,
    and other rows are untouched; ``first_unsafe_class`` names the first class over it and its ratio."""
    from sparsecoll.model.profile import FORMS
    native = numpy.full((len(FORMS), choice.CLASSES), 100e-6)
    small_only = native * 0.5
    small_only[:, 20] = native[0, 20] * (choice.PINNED_ALLOWANCE + 0.01)  # one class over the allowance
    steady = native * 0.5
    steady[:, 25:] = native[0, 25] * choice.PINNED_ALLOWANCE  # at the allowance: kept
    seconds = {choice.NATIVE: native, "direct": small_only, "cartesian": steady}
    safe = choice.safe_at_every_size(seconds, ("blocking",))
    blocking, persistent = FORMS.index("blocking"), FORMS.index("persistent")
    assert numpy.all(numpy.isinf(safe["direct"][blocking]))
    assert numpy.array_equal(safe["direct"][persistent], small_only[persistent])
    assert safe["cartesian"] is steady and safe[choice.NATIVE] is native
    assert numpy.array_equal(seconds["direct"], small_only)  # the caller's arrays are not changed
    del safe["cartesian"]
    assert choice.decide(safe)[blocking] == [choice.NATIVE] * choice.CLASSES
    assert choice.decide(safe)[persistent][4] == "direct"
    assert choice.first_unsafe_class(seconds, "direct", "blocking") == (
        20, pytest.approx(choice.PINNED_ALLOWANCE + 0.01))
    assert choice.first_unsafe_class(seconds, "cartesian", "blocking") == (None, None)


def test_every_byte_sparsecoll_moves_costs_its_byte_factor():
    """``byte_factor``: sparsecoll's schedules (built or estimated) pay it on every byte, the
    library's call never."""
    from sparsecoll.algorithms.direct import direct_pattern
    from sparsecoll.topology.cartesian import Grid, offset_topology
    moore = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if (dx, dy) != (0, 0)]
    topology = offset_topology(Grid((4, 4), (True, True)), 5, moore)
    base = BUILTIN.loads[1]
    slower = replace(base, sparsecoll_byte_factor={"allgather": 3.0, "alltoall": 1.0})
    pattern = direct_pattern(topology, "allgather")
    for native, factor in ((False, 3.0), (True, 1.0)):
        assert choice.pattern_cost(pattern, slower, native=native).per_byte == pytest.approx(
            factor * choice.pattern_cost(pattern, base, native=native).per_byte)
    for estimate in (choice.estimate_distance_halving, choice.estimate_common_neighbor):
        assert estimate(topology, "allgather", {}, slower, None).per_byte == pytest.approx(
            3 * estimate(topology, "allgather", {}, base, None).per_byte)
        assert estimate(topology, "alltoall", {}, slower, None).per_byte == pytest.approx(
            estimate(topology, "alltoall", {}, base, None).per_byte)


def test_every_step_but_one_that_waits_for_a_handshake_pays_for_it():
    """``rendezvous_step``: a two-step schedule past the eager limit pays it once, one step never."""
    from sparsecoll.algorithms.cartesian import combining_pattern
    from sparsecoll.algorithms.direct import direct_pattern
    from sparsecoll.topology.cartesian import Grid, offset_topology
    nine_point = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if (dx, dy) != (0, 0)]
    topology = offset_topology(Grid((4, 4), (True, True)), 5, nine_point)
    base = BUILTIN.loads[0]
    waiting = type(base)(1.0, {k: {**v, "rendezvous_step": 7e-6} for k, v in base.levels.items()},
                         base.sparsecoll_per_call, base.sparsecoll_per_step, base.native_per_call)
    small, large = choice.size_class(8), choice.size_class(1 << 16)
    for pattern, native, waits in ((combining_pattern(topology, "alltoall"), False, 1),
                                   (direct_pattern(topology, "alltoall"), False, 0),
                                   (direct_pattern(topology, "alltoall"), True, 0)):
        extra = numpy.subtract(choice.pattern_cost(pattern, waiting, native=native).by_class,
                               choice.pattern_cost(pattern, base, native=native).by_class)
        assert extra[small] == 0.0
        assert extra[large] == pytest.approx(waits * 7e-6)


@pytest.mark.parametrize("dims", [(4, 4), (4, 2), (2, 1)])
def test_the_calibration_fit_recovers_the_costs_it_is_given(dims):
    """Times made by the model from known costs, as auto prices each candidate, are fitted back to
    those costs. On 8 ranks (4 x 2) and 2 ranks (2 x 1) a neighbor along a periodic dimension of 2
    is one rank both ways, so cartesian's allgather fills some blocks by final copies, which auto
    charges as one more step and the fit must too. Where cartesian takes no more steps than
    direct, the per-step cost cannot be seen and the base profile's stands (not 0, which would
    make every extra step free)."""
    from sparsecoll.algorithms.cartesian import combining_pattern
    from sparsecoll.algorithms.direct import direct_pattern
    from sparsecoll.model.calibrate import (
        PROFILE_LARGE,
        PROFILE_SMALL,
        PROFILE_STENCIL,
        eager_straddle,
        fit_profile_load,
    )
    from sparsecoll.model.profile import FORMS, LEVELS, Load
    from sparsecoll.topology.cartesian import Grid, offset_topology
    alpha, beta, overhead, rendezvous, step_wait = 2e-6, 0.5e-9, 0.4e-6, 1.5e-6, 5e-6
    levels = {level: {"alpha": alpha, "beta": beta, "overhead": overhead, "rendezvous": rendezvous,
                      "rendezvous_step": step_wait} for level in LEVELS}
    levels["self"] = {"alpha": 0.0, "beta": 0.1e-9, "overhead": overhead, "rendezvous": 0.0, "rendezvous_step": 0.0}
    truth = Load(1.0, levels, {"blocking": 9e-6, "nonblocking": 12e-6, "persistent": 4e-6}, 6e-6,
                 {"blocking": 5e-6, "nonblocking": 6e-6, "persistent": 3e-6}, {"allgather": 1.5, "alltoall": 2.5},
                 {"per_message": -0.2e-6, "byte_factor": 1.7},
                 # a dimension of 1 (2 ranks): direct sends to itself, and the fit leaves the factor at 1
                 sparsecoll_byte_factor=1.0 if dims == (2, 1) else {"allgather": 1.2, "alltoall": 1.9})

    def ring(per_call, edges, block):
        return per_call + alpha + 2 * edges * (overhead + block * beta)
    small, large = PROFILE_SMALL, PROFILE_LARGE
    times = {("native", form, 1, small): ring(truth.native_per_call[form], 1, small) for form in FORMS}
    one_step = truth.sparsecoll_per_step
    times.update({("direct", form, 1, small): ring(truth.sparsecoll_per_call[form] + one_step, 1, small)
                  for form in FORMS})
    topology = offset_topology(Grid(dims, (True, True)), 1 if dims == (2, 1) else 5, PROFILE_STENCIL)
    if dims != (4, 4):
        assert choice.final_copies(combining_pattern(topology, "allgather"), topology.recv_items("allgather"))
    def stencil_of(truth):
        """The calibration's stencil medians as the model prices them under ``truth``."""
        stencil = {}
        for family in ("alltoall", "allgather"):
            patterns = {"native": direct_pattern(topology, family), "direct": direct_pattern(topology, family),
                        "cartesian": combining_pattern(topology, family)}
            for name, pattern in patterns.items():
                seconds = choice.candidate_cost(name, pattern, truth, None, topology.recv_items(family)).seconds()
                for form in ("blocking", "persistent"):
                    for block in (small, large):
                        stencil[(name, family, form, block)] = (
                            float(seconds[FORMS.index(form), choice.size_class(block)]), pattern)
                if family == "alltoall" and name != "native":  # just past the eager limit
                    past = eager_straddle()[1]
                    stencil[(name, family, "persistent", past)] = (
                        float(seconds[FORMS.index("persistent"), choice.size_class(past)]), pattern)
            if family == "alltoall":  # the library's call just within and just past its eager limit
                cost = choice.pattern_cost(patterns["native"], truth, native=True)
                for block in eager_straddle():
                    stencil[("native", family, "persistent", block)] = (
                        cost.fixed[FORMS.index("persistent")] + cost.by_class[choice.size_class(block)]
                        + cost.per_byte * block, patterns["native"])
            if family == "alltoall":  # the RMA executor's twin of direct's persistent request, and its step twin
                steps = choice.pattern_cost(patterns["direct"], truth)
                for name, seconds in (("direct[rma]", choice.rma_cost(steps, truth.rma).seconds()),
                                      ("direct[steps]", steps.seconds())):
                    for block in (small, large):
                        stencil[(name, family, "persistent", block)] = (
                            float(seconds[FORMS.index("persistent"), choice.size_class(block)]), patterns["direct"])
        return stencil

    stencil = stencil_of(truth)
    fitted = fit_profile_load(times, 1.0, "socket", 0.1e-9, alpha + 2 * overhead + small * beta, BUILTIN.loads[0],
                              stencil)
    assert fitted.levels["socket"]["overhead"] == pytest.approx(overhead)
    assert fitted.levels["socket"]["rendezvous"] == pytest.approx(rendezvous, rel=1e-3)
    assert fitted.levels["socket"]["rendezvous_step"] == pytest.approx(step_wait if dims != (2, 1) else 0.0, abs=1e-9)
    assert fitted.levels["socket"]["beta"] == pytest.approx(beta)
    assert fitted.levels["socket"]["alpha"] == pytest.approx(alpha)
    for form in FORMS:
        assert fitted.native_per_call[form] == pytest.approx(truth.native_per_call[form], rel=1e-3)
    if dims == (4, 4):  # cartesian measured as direct: no extra step to see
        flat = {key: stencil[("direct", *key[1:])] if key[0] == "cartesian" else value
                for key, value in stencil.items()}
        unseen = fit_profile_load(times, 1.0, "socket", 0.1e-9, alpha + 2 * overhead + small * beta,
                                  BUILTIN.loads[0], flat)
        assert unseen.sparsecoll_per_step == BUILTIN.loads[0].sparsecoll_per_step
        for form in ("blocking", "persistent"):  # one step costs what direct's was measured at
            assert unseen.sparsecoll_per_call[form] + unseen.sparsecoll_per_step == pytest.approx(
                truth.sparsecoll_per_call[form] + truth.sparsecoll_per_step, rel=1e-3)
    for form in ("blocking", "persistent"):
        assert fitted.sparsecoll_per_call[form] == pytest.approx(truth.sparsecoll_per_call[form], rel=1e-3)
    assert fitted.sparsecoll_per_step == pytest.approx(truth.sparsecoll_per_step, rel=1e-3)
    combining = {family: any(len(m.items) > 1 for step in stencil[("cartesian", family, "blocking", small)][1].steps
                             for m in step.sends) for family in ("alltoall", "allgather")}
    seen = {family: factor if combining[family] else 1.0 for family, factor in truth.combined_factor.items()}
    assert fitted.combined_factor == pytest.approx(seen, rel=1e-3)  # each family's own, where it combines
    assert fitted.sparsecoll_byte_factor == pytest.approx(truth.sparsecoll_byte_factor, rel=1e-3)
    if dims == (2, 1):  # a factor the fit cannot see there is not fitted
        slower = replace(truth, sparsecoll_byte_factor={"allgather": 1.2, "alltoall": 1.9})
        assert fit_profile_load(times, 1.0, "socket", 0.1e-9, alpha + 2 * overhead + small * beta, BUILTIN.loads[0],
                                stencil_of(slower)).sparsecoll_byte_factor == {"allgather": 1.0, "alltoall": 1.0}
    assert fitted.native_shortcut == 0.0  # not measured
    through = dict(stencil)
    native_small = stencil[("native", "allgather", "blocking", small)]
    through[("shortcut", "allgather", "blocking", small)] = (native_small[0] + 3e-7, native_small[1])
    assert fit_profile_load(times, 1.0, "socket", 0.1e-9, alpha + 2 * overhead + small * beta, BUILTIN.loads[0],
                            through).native_shortcut == pytest.approx(3e-7)
    assert fitted.rma["per_message"] == pytest.approx(truth.rma["per_message"], rel=1e-3)
    assert fitted.rma["byte_factor"] == pytest.approx(truth.rma["byte_factor"], rel=1e-3)
    # direct faster on the stencil than the model says (the library paying more per edge) never
    # lowers sparsecoll's per-call cost below what the one-edge ring shows; slower raises it
    for shift, expected in ((-2e-6, 0.0), (+2e-6, 2e-6)):
        shifted = {key: (seconds + shift, pattern) if key[0] == "direct" and key[3] == small else (seconds, pattern)
                   for key, (seconds, pattern) in stencil.items()}
        refit = fit_profile_load(times, 1.0, "socket", 0.1e-9, alpha + 2 * overhead + small * beta,
                                 BUILTIN.loads[0], shifted)
        for form in ("blocking", "persistent"):
            assert refit.sparsecoll_per_call[form] + refit.sparsecoll_per_step == pytest.approx(
                truth.sparsecoll_per_call[form] + truth.sparsecoll_per_step + expected, rel=1e-3)


def test_final_local_copies_are_charged_as_one_more_step():
    """A 9-point stencil on a 2 x 1 torus: every neighbor is this rank or the other one, so
    cartesian's one message leaves 7 receive blocks to the executor's final copies (one more
    step of messages to self), which the model charges; direct receives every block itself."""
    from sparsecoll.algorithms.cartesian import combining_pattern
    from sparsecoll.algorithms.direct import direct_pattern
    from sparsecoll.model.calibrate import PROFILE_STENCIL
    from sparsecoll.topology.cartesian import Grid, offset_topology
    topology = offset_topology(Grid((2, 1), (True, True)), 0, PROFILE_STENCIL)
    load = BUILTIN.loads[0]
    blocks = topology.recv_items("allgather")
    combined, direct = combining_pattern(topology, "allgather"), direct_pattern(topology, "allgather")
    assert choice.final_copies(combined, blocks) == 7 and choice.final_copies(direct, blocks) == 0
    plain, charged = choice.pattern_cost(combined, load), choice.pattern_cost(combined, load, recv_items=blocks)
    assert charged.steps == plain.steps + 1
    self_overhead = load.levels["self"]["overhead"]
    assert numpy.allclose(numpy.array(charged.by_class) - plain.by_class, 14 * self_overhead)
    assert charged.fixed[0] - plain.fixed[0] == pytest.approx(load.sparsecoll_per_step)
    assert choice.pattern_cost(direct, load, recv_items=blocks) == choice.pattern_cost(direct, load)


def test_static_buffers_add_rma_twins_for_persistent_requests_only():
    """Under cdag_static_buffers every candidate but native has an ``[rma]`` twin, charged from the
    profile's rma costs for persistent requests and impossible for the other forms; it wins where
    its costs are low, and is absent without the key or without rma costs in the profile."""
    from sparsecoll.model.profile import FORMS
    from sparsecoll.topology.cartesian import Grid, offset_topology
    topology = offset_topology(Grid((4, 4), (True, True)), 5, [(1, 0), (-1, 0), (0, 1), (0, -1)])
    load = replace(BUILTIN.loads[0], rma={"per_message": 0.0, "byte_factor": 1.0})
    plain = choice.local_costs(topology, "alltoall", {}, load, None, {})
    assert not any(name.endswith(choice.RMA_SUFFIX) for name in plain)
    costs = choice.local_costs(topology, "alltoall", {}, load, None, {}, static_buffers=True)
    twins = {name for name in costs if name.endswith(choice.RMA_SUFFIX)}
    assert twins == {name + choice.RMA_SUFFIX for name in plain if name != choice.NATIVE}
    direct, twin = costs["direct"].seconds(), costs["direct[rma]"].seconds()
    persistent = FORMS.index("persistent")
    assert numpy.allclose(twin[persistent], direct[persistent])  # free RMA: the same schedule's time
    assert numpy.isinf(twin[FORMS.index("blocking")]).all() and numpy.isinf(twin[FORMS.index("nonblocking")]).all()
    dear = replace(load, rma={"per_message": 1e-6, "byte_factor": 2.0})
    costly = choice.local_costs(topology, "alltoall", {}, dear, None, {}, static_buffers=True)["direct[rma]"]
    assert costly.seconds()[persistent][3] == pytest.approx(
        direct[persistent][3] + 2 * costs["direct"].messages * 1e-6 + costs["direct"].per_byte * choice.CLASS_BYTES[3])
    # RMA cheaper per message (a difference may be negative, never below zero time) and the library
    # priced out: a twin wins the persistent form, never the blocking form
    cheap = replace(load, rma={"per_message": -1.0, "byte_factor": 0.5})
    costs = choice.local_costs(topology, "alltoall", {}, cheap, None, {}, static_buffers=True)
    assert (costs["direct[rma]"].seconds()[persistent] >= 0).all()
    seconds = {name: cost.seconds() for name, cost in costs.items()}
    seconds[choice.NATIVE] = seconds[choice.NATIVE] + 1.0
    table = choice.decide(seconds)
    assert table[persistent][3].endswith(choice.RMA_SUFFIX)
    assert not any(name.endswith(choice.RMA_SUFFIX) for name in table[FORMS.index("blocking")])
    assert choice.split_candidate("direct[rma]") == ("direct", "rma")
    assert choice.split_candidate("direct") == ("direct", None)
    # a profile without RMA costs (each rank may hold its own) keeps the candidates, never to win
    unmeasured = choice.local_costs(topology, "alltoall", {}, replace(load, rma=None), None, {}, static_buffers=True)
    assert list(unmeasured) == list(costs)
    assert numpy.isinf(unmeasured["direct[rma]"].seconds()).all()


@pytest.mark.timeout(200)
def test_loads_of_one_ranks_per_core_are_kept_apart_by_ranks_per_node(tmp_path):
    """Each rank on a core of its own (Open MPI binds so) is 1 rank per core at every rank count:
    the 2-, 8- and 16-rank calibrations on 16 cores all stay, and each rank count finds its own."""
    import dataclasses
    base = BUILTIN.loads[0]
    bound = [dataclasses.replace(base, ranks_per_core=1.0, ranks_per_node=n, sparsecoll_per_step=n * 1e-6)
             for n in (2, 8, 16)]
    profile = Profile((), "MPICH 5.0")
    for load in bound:
        profile = profile.with_load(load)
    assert [load.ranks_per_node for load in profile.loads] == [2, 8, 16]
    assert profile.load_for(1.0, 8) is bound[1] and profile.load_for(1.0, 2) is bound[0]
    assert profile.load_for(1.0, 12) is bound[2] and profile.load_for(1.0, 3) is bound[0]  # nearest by ratio
    assert profile.load_for(0.9, 16) is bound[2]
    again = dataclasses.replace(bound[1], sparsecoll_per_step=5e-6)
    assert profile.with_load(again).load_for(1.0, 8) is again and len(profile.with_load(again).loads) == 3
    # ranks per core decides first: 8 ranks at 4 ranks per core is the heavy load, not the 8-rank one
    heavy = dataclasses.replace(base, ranks_per_core=4.0, ranks_per_node=2)
    assert profile.with_load(heavy).load_for(4.0, 8) is heavy
    # a profile written before ranks_per_node was kept: its entry is as near as any, and a new
    # calibration at the same ranks per core replaces it
    old = dataclasses.replace(base, ranks_per_core=1.0, ranks_per_node=None)
    assert Profile((old,)).load_for(1.0, 8) is old
    assert Profile((old,)).with_load(bound[0]).loads == (bound[0],)
    path = tmp_path / "p.json"
    profile.save(path)
    assert Profile.load(path) == profile
    assert "ranks_per_node" not in json.loads(json.dumps(old.to_json()))


def test_sparsecoll_calibrate_writes_a_profile_that_auto_reads(tmp_path):
    """The command end to end at 2 ranks: a profile file for this library, loadable and merged by load."""
    import subprocess
    import sys

    from sparsecoll.model.profile import library_name
    out = tmp_path / "profile.json"
    for _ in range(2):  # the second run replaces the entry of the same load
        run = subprocess.run([sys.executable, "-m", "sparsecoll", "calibrate", "--np", "2", "--reps", "20",
                              "--out", str(out)], capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "written to" in run.stdout
    profile = check_library(Profile.load(out))
    assert profile.mpi_library == library_name() and len(profile.loads) == 1
    assert profile.loads[0].ranks_per_core > 0 and profile.loads[0].ranks_per_node == 2
    assert resolve(str(out)) == profile


def test_sparsecoll_calibrate_says_where_it_replaces_another_librarys_profile(tmp_path):
    """``--out`` naming a profile of another MPI library (the same --out under both libraries): the
    file holds one library's loads, so calibrate starts a new one, as for a file that is no
    profile, but it replaced the other library's measurements without a word (a file that is
    no profile is reported); it now says so."""
    import subprocess
    import sys

    from sparsecoll.model.profile import library_name
    out = tmp_path / "profile.json"
    other = "Open MPI 5.0" if library_name().startswith("MPICH") else "MPICH 5.0"
    Profile(BUILTIN.loads, other, "host-a", "the other library's").save(out)
    run = subprocess.run([sys.executable, "-m", "sparsecoll", "calibrate", "--np", "2", "--reps", "20",
                          "--out", str(out)], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"replacing its profile of {other}" in run.stdout and str(out) in run.stdout
    assert Profile.load(out).mpi_library == library_name()


def test_auto_gives_open_mpi_the_side_a_rank_has_no_edges_on():
    """open-mpi/ompi#14452: Open MPI compares a rank's send and receive counts even where one of its
    degrees is 0, so auto's library calls there get that side with the other's count."""
    from sparsecoll.topology import graph_topology
    absent = choice.library_absent_side
    source_only = graph_topology(0, 3, [], [1, 2])  # sends, receives nothing
    sink_only = graph_topology(0, 3, [1, 2], [])
    alone, both = graph_topology(0, 3, [], []), graph_topology(0, 3, [1], [2])
    assert absent(source_only, "Open MPI 5.0", "alltoall") == absent(source_only, "Open MPI 5.0", "allgather") == "recv"
    assert absent(sink_only, "Open MPI 5.0", "alltoall") == "send"
    assert absent(sink_only, "Open MPI 5.0", "allgather") is None  # an allgather always sends its one block
    assert absent(alone, "Open MPI 5.0", "allgather") == "recv" and absent(alone, "Open MPI 5.0", "alltoall") is None
    assert absent(both, "Open MPI 5.0", "alltoall") is None
    assert absent(source_only, "MPICH 5.0", "alltoall") is None
    assert absent(source_only, "Open MPI 5.0", "alltoallv") is None  # the v/w forms take explicit counts


def test_auto_never_runs_a_library_call_known_to_be_wrong():
    from sparsecoll.topology import CART, PROC_NULL, graph_topology
    ring_of_two = graph_topology(0, 2, [1, 1], [1, 1], kind=CART)  # periodic ring of 2: both neighbors rank 1
    assert "ompi#14430" in choice.library_fault(ring_of_two, "Open MPI 5.0")
    assert choice.library_fault(ring_of_two, "MPICH 5.0") is None
    assert choice.library_fault(graph_topology(0, 3, [1, 2], [1, 2], kind=CART), "Open MPI 5.0") is None
    with_hole = graph_topology(0, 3, [1, PROC_NULL], [PROC_NULL, 2])  # a distributed graph
    assert "PROC_NULL" in choice.library_fault(with_hole, "Open MPI 5.0")
    assert choice.library_fault(with_hole, "MPICH 5.0") is None
    assert choice.library_fault(graph_topology(0, 3, [1, PROC_NULL], [PROC_NULL, 2], kind=CART),
                                "Open MPI 5.0") is None  # a Cartesian communicator's holes are fine
    shape = (3, choice.CLASSES)
    seconds = {"native": numpy.full(shape, 1.0), "direct": numpy.full(shape, 5.0)}
    assert {name for row in choice.decide(seconds, native_allowed=False) for name in row} == {"direct"}
    # before auto decides (a nonblocking call cannot agree): only what every rank knows alone counts
    local = choice.local_nonblocking_library_fault
    assert "ompi#14430" in local(ring_of_two, "Open MPI 5.0")  # a periodic dimension of 2: every rank
    assert local(ring_of_two, "MPICH 5.0") is None
    assert local(with_hole, "Open MPI 5.0") is None  # its crash is in the blocking calls alone
    corner = graph_topology(0, 4, [PROC_NULL, 2, PROC_NULL, 1], [PROC_NULL, 2, PROC_NULL, 1], kind=CART)
    assert choice.library_fault(corner, "Open MPI 5.0") is None  # PROC_NULL twice is no fault (it was counted)
    assert local(corner, "Open MPI 5.0") is None


def test_library_version_drops_the_nul_open_mpi_ends_it_with(monkeypatch):
    from mpi4py import MPI

    from sparsecoll.model.profile import library_version
    monkeypatch.setattr(MPI, "Get_library_version", lambda: "Open MPI v5.0.11, package: x\x00\nsecond line\n")
    assert library_version() == "Open MPI v5.0.11, package: x"


def test_a_profile_levels_are_self_then_the_placement_pair_classes():
    """profile.LEVELS spells the pair classes out (it loads without MPI); they must stay equal."""
    from sparsecoll.model.profile import LEVELS
    from sparsecoll.topology.placement import PAIR_CLASSES
    assert LEVELS == ("self",) + PAIR_CLASSES


@pytest.mark.parametrize("text", ['{"format": 1, "loads": [' + "1" * 5000 + "]}",  # past Python's int digit limit
                                  "[" * 100000 + "]" * 100000])  # nesting past the recursion limit
def test_json_that_python_cannot_parse_is_a_profile_error_naming_the_file(tmp_path, text):
    """json raises a plain ValueError or RecursionError for these, which wrap does not catch as a
    profile's fault: the rank whose file it was raised alone and the others waited in wrap's
    agreement for good. A ProfileError makes every rank raise."""
    path = tmp_path / "odd.json"
    path.write_text(text)
    with pytest.raises(ProfileError, match="not JSON") as caught:
        Profile.load(path)
    assert str(path) in str(caught.value)
    with pytest.raises(ProfileError, match="profile"):
        resolve("bad\x00name.json")  # open() raises ValueError for a NUL


@pytest.mark.parametrize("made, key", [
    (lambda: Profile(loads=()), "loads"),
    (lambda: Profile(loads=(1,)), "loads"),
    (lambda: Profile(BUILTIN.loads, mpi_library=5), "mpi_library"),
    (lambda: Profile((replace(BUILTIN.loads[0], sparsecoll_per_step=float("nan")),)), "loads[0].sparsecoll.per_step"),
    (lambda: Profile((replace(BUILTIN.loads[0], ranks_per_core=0.0),)), "loads[0].ranks_per_core"),
])
def test_a_profile_object_is_checked_as_a_file_is(made, key):
    """wrap(comm, profile=Profile(...)) took the object unchecked: empty loads raised 'min() arg is
    an empty sequence' at the first call (on one rank alone where only its profile was bad, the
    others waiting), a NaN cost decided silently."""
    with pytest.raises(ProfileError) as caught:
        resolve(made())
    assert repr(key) in str(caught.value)
    explicit = Profile(BUILTIN.loads, source="explicit")
    assert resolve(explicit) is explicit
