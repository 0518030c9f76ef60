"""Profiles: the measured costs ``algorithm="auto"`` predicts with, and where they are kept.

A profile holds, for one host and one MPI library, one or more *loads* (the number of
ranks per core the measurement ran at: 1 or less is a rank per core, more is
oversubscribed), each with

* ``levels``: per placement level (``self``: a copy to the rank itself; ``socket``, ``node``,
  ``network``: a message to a rank on the same socket, same node, other node) the
  Hockney latency ``alpha`` (s), time per byte ``beta`` (s/byte), per-message CPU
  ``overhead`` (s, paid for every send and every receive) and, optional (default 0),
  ``rendezvous`` (s, paid on top for every send and receive of a message past the library's
  eager limit, :class:`sparsecoll.execute.p2p.WireLimits`: the handshake such a message waits
  for, which joining messages to one peer saves) and ``rendezvous_step`` (s, optional, default
  0: what a step of a multi-step schedule with such a message adds, its handshake on the
  critical path, for every such step but one);
* ``sparsecoll``: the software cost of sparsecoll's own executor, ``per_call`` by form
  (``blocking``, ``nonblocking``, ``persistent``), ``per_step`` (the scheduling round a
  multi-step schedule pays between its steps) and ``combined_factor`` (optional, default 1:
  how many times ``beta`` a byte costs in a message that combines several blocks, which the
  library moves as a derived datatype; one number, or one per family, ``{"allgather": ...,
  "alltoall": ...}``, as ``calibrate`` fits it: the two families' combined messages are laid
  out differently (an alltoall forwards blocks through sparsecoll's own transit space, an
  allgather from the user's receive buffer), and their fits differ: 8 ranks on 2 cores,
  alltoall 1.6-1.8 and allgather 4.0-4.6 on MPICH, 1.00 and 1.27 on Open MPI
  (``benchmarks/auto/eighth-run``, ``ninth-run``); one factor for both charged one family's
  bytes for the other's) and ``byte_factor`` (optional, default 1; one number or one per family
  like ``combined_factor``: how many times ``beta`` any byte sparsecoll's executor moves costs,
  against the library moving the same bytes in its own call, ``combined_factor`` on top for
  combined messages. ``calibrate`` fits it from ``direct`` against the library's call on the
  stencil at 64 KiB: on Open MPI 5.0, 8 ranks on 2 cores, ``direct`` took 1.6-1.8 x the
  library's time there, the same messages, while MPICH's took 1.0-1.1 x; without it the model
  charged ``direct`` 1.02 x and ``distance_halving`` 0.65 x the library's call on the Moore
  neighborhood at 64 KiB, measured 1.28 x and 0.99 x);
* ``native``: the MPI library's own ``per_call`` cost by form, and ``shortcut`` (s, optional,
  default 0): what a blocking call pays to reach the library's method through the size
  comparison of a form whose table mixes the library with other algorithms
  (:func:`sparsecoll.runtime.auto.library_shortcut`), measured by ``calibrate`` on the
  stencil's 8 B allgather (8 ranks on 2 cores: 6-8 us on Open MPI, 5.5 us on MPICH;
  :data:`sparsecoll.model.choice.SHORTCUT_ALLOWANCE` says what auto does with it);
* ``rma`` (optional): what a persistent request costs on the RMA executor
  (:mod:`sparsecoll.execute.rma`) against the step executor: ``per_message`` (s, for every
  message a rank sends or receives: a put and its ready-to-receive message instead of a send
  and a receive; a *difference*, so negative where RMA is cheaper, as on the RDMA networks of
  SC12 section II-C) and ``byte_factor`` (positive: how many times the step executor's
  per-byte cost a byte costs as a put). ``auto`` considers that executor only under
  ``cdag_static_buffers`` and only where a profile has these (the built-in one has
  conservative values).

:mod:`sparsecoll.model.choice` turns these and a Pattern into a predicted time. Profiles
are written by ``sparsecoll calibrate`` to :func:`default_path` (the user's cache
directory, per host and library, via platformdirs). :func:`resolve` picks the one in force:
``wrap(comm, profile=...)`` (a path or a :class:`Profile`), else the environment variable
``SPARSECOLL_PROFILE`` (a path, or ``builtin``), else the calibrated file of this host and
library if there is one, else :data:`BUILTIN`, a conservative profile under which
sparsecoll's schedules must win clearly before they replace the library's call.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import secrets
import zlib
from dataclasses import dataclass, field

from ..checks import is_integer
from ..pattern import FAMILIES

FORMAT = 1
ENVIRONMENT = "SPARSECOLL_PROFILE"
#: Where a message goes: to itself, then :data:`sparsecoll.topology.placement.PAIR_CLASSES`
#: (spelled out: this module loads without MPI, for ``sparsecoll calibrate -h``; a test holds them equal).
LEVELS = ("self", "socket", "node", "network")
LEVEL_FIELDS = ("alpha", "beta", "overhead")
#: Level fields a profile may leave out (profiles written before they were measured), and their default.
OPTIONAL_LEVEL_FIELDS = {"rendezvous": 0.0, "rendezvous_step": 0.0}
FORMS = ("blocking", "nonblocking", "persistent")
#: The keys of one entry of a profile's ``loads`` (``rma`` and ``ranks_per_node`` optional).
LOAD_KEYS = ("ranks_per_core", "levels", "sparsecoll", "native", "rma", "ranks_per_node")
#: The keys of a profile file (``host`` and ``source`` optional).
PROFILE_KEYS = ("format", "mpi_library", "host", "source", "loads")


#: The largest size of any value a profile holds: far above any time in seconds, per byte, factor
#: or rank count a machine gives, and small enough that the model's products stay finite (a
#: per-byte cost of 1e308 made its predictions NaN).
LARGEST_VALUE = 1e6


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and the key."""


class ProfileTypeError(ProfileError, TypeError):
    """A profile argument of the wrong kind (not a path or a :class:`Profile`, or given where no
    profile is read): a TypeError, and a ProfileError, which ``wrap`` raises on every rank (each
    rank may pass its own profile, so only some ranks may pass a bad one)."""


@dataclass(frozen=True)
class Load:
    """The parameters measured at one load: ranks per core, and the ranks per node they were
    measured with (None in profiles written before it was kept: any)."""

    ranks_per_core: float
    levels: dict  # level -> {alpha, beta, overhead, rendezvous and rendezvous_step (optional)}
    sparsecoll_per_call: dict  # form -> seconds
    sparsecoll_per_step: float
    native_per_call: dict  # form -> seconds
    combined_factor: dict = field(default_factory=lambda: dict.fromkeys(FAMILIES, 1.0))  # family -> >= 1
    rma: dict | None = None  # {"per_message": s (signed), "byte_factor": > 0}, or None: not measured
    #: Where each rank has a core of its own (Open MPI binds each to one), every rank count is
    #: 1 rank per core: the rank count keeps 2, 8 and 16 ranks on 16 cores apart.
    ranks_per_node: int | None = None
    #: family -> >= 1: the time per byte sparsecoll's executor pays over the library's (``beta``'s multiple)
    sparsecoll_byte_factor: dict = field(default_factory=lambda: dict.fromkeys(FAMILIES, 1.0))
    native_shortcut: float = 0.0  # seconds a call pays to reach the library through the size comparison

    def __post_init__(self):
        if any(name not in values for values in self.levels.values() for name in OPTIONAL_LEVEL_FIELDS):
            object.__setattr__(self, "levels", {level: {**OPTIONAL_LEVEL_FIELDS, **values}
                                                for level, values in self.levels.items()})
        for name in ("combined_factor", "sparsecoll_byte_factor"):  # one number for both families
            if not isinstance(getattr(self, name), dict):
                object.__setattr__(self, name, dict.fromkeys(FAMILIES, float(getattr(self, name))))

    def to_json(self) -> dict:
        """A JSON-ready dict (the file's ``loads`` entries)."""
        return {"ranks_per_core": self.ranks_per_core, "levels": self.levels,
                "sparsecoll": {"per_call": self.sparsecoll_per_call, "per_step": self.sparsecoll_per_step,
                               "combined_factor": dict(self.combined_factor),
                               "byte_factor": dict(self.sparsecoll_byte_factor)},
                "native": {"per_call": self.native_per_call, "shortcut": self.native_shortcut},
                **({"rma": self.rma} if self.rma is not None else {}),
                **({"ranks_per_node": self.ranks_per_node} if self.ranks_per_node is not None else {})}

    def describe(self) -> str:
        """The load in a few words: ``0.5`` or ``0.5 (8 ranks per node)``."""
        return f"{self.ranks_per_core:g}" + (f" ({self.ranks_per_node} ranks per node)"
                                              if self.ranks_per_node is not None else "")


@dataclass(frozen=True)
class Profile:
    """A profile: loads measured on one host with one MPI library (``mpi_library`` None: any)."""

    loads: tuple
    mpi_library: str | None = None
    host: str | None = None
    source: str = ""
    path: str | None = field(default=None, compare=False)

    def load_for(self, ranks_per_core: float, ranks_per_node: int | None = None) -> Load:
        """The load measured nearest to ``ranks_per_core`` (by ratio), and among those the one
        measured nearest to ``ranks_per_node`` (by ratio; an entry that does not say is as near
        as any)."""
        def distance(load: Load) -> tuple:
            per_node = (0.0 if ranks_per_node is None or load.ranks_per_node is None
                        else _log_ratio(load.ranks_per_node, ranks_per_node))
            return _log_ratio(load.ranks_per_core, ranks_per_core), per_node
        return min(self.loads, key=distance)

    def with_load(self, load: Load) -> Profile:
        """This profile with ``load`` added, replacing one measured at the same ranks per core and
        ranks per node (or one that does not say its ranks per node)."""
        def replaced(entry: Load) -> bool:
            return entry.ranks_per_core == load.ranks_per_core and entry.ranks_per_node in (None, load.ranks_per_node)
        kept = tuple(entry for entry in self.loads if not replaced(entry))
        ordered = sorted(kept + (load,), key=lambda entry: (entry.ranks_per_core, entry.ranks_per_node or 0))
        return Profile(tuple(ordered), self.mpi_library, self.host, self.source, self.path)

    def describe(self) -> str:
        """Where the profile comes from, in one line."""
        where = self.path or "built in"
        return f"{where} ({self.source})" if self.source else where

    def fingerprint(self) -> int:
        """A number that is the same for profiles of the same content (on any rank): wrap compares
        it between wraps of one communicator, so that another profile decides anew."""
        return zlib.crc32(json.dumps(self.to_json(), sort_keys=True).encode())

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"format": FORMAT, "mpi_library": self.mpi_library, "host": self.host, "source": self.source,
                "loads": [load.to_json() for load in self.loads]}

    def save(self, path) -> None:
        """Write the profile file (directories created as needed)."""
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        # a whole new file, then one rename: a rank reading the profile while calibrate writes it
        # sees the old file or the new one, never half of one. Made by open() ("x": a name no other
        # writer holds), so it has the umask's mode, as a file written in place would (mkstemp's is
        # 0600: a profile shared through SPARSECOLL_PROFILE was unreadable to other users)
        written = os.path.join(directory, f".profile-{os.getpid()}-{secrets.token_hex(8)}.json")
        try:
            with open(written, "x") as f:
                json.dump(self.to_json(), f, indent=2)
                f.write("\n")
            os.replace(written, path)
        except BaseException:
            if os.path.exists(written):
                os.unlink(written)
            raise

    @classmethod
    def from_json(cls, data, path: str = "<profile>") -> Profile:
        """Check and read a profile's dict; :class:`ProfileError` names ``path`` and the key."""
        reader = FileReader(path)
        data = reader.mapping(data, "")
        if "loads" not in data and "model" in data and "classes" in data:
            raise ProfileError(f"{path}: is a parameter file of the simulator's models (sparsecoll simulate "
                               f"--params), not a profile for auto; write one with `sparsecoll calibrate` "
                               f"without --model")
        fmt = data.get("format")
        if isinstance(fmt, bool) or fmt != FORMAT:
            raise ProfileError(f"{path}: key 'format': expected {FORMAT}, got {fmt!r}")
        for key in ("mpi_library", "host"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise ProfileError(f"{path}: key {key!r}: expected a string or null, got {data[key]!r}")
        if not isinstance(data.get("source", ""), str):
            raise ProfileError(f"{path}: key 'source': expected a string, got {data['source']!r}")
        reader.known(data, PROFILE_KEYS, "")
        loads = reader.field(data, "loads", "")
        if not isinstance(loads, list) or not loads:
            raise ProfileError(f"{path}: key 'loads': expected a non-empty list")
        checked = tuple(reader.load(entry, f"loads[{i}]") for i, entry in enumerate(loads))
        measured_at: dict = {}
        for i, load in enumerate(checked):  # load_for would take the first of two silently
            first = measured_at.setdefault((load.ranks_per_core, load.ranks_per_node), i)
            if first != i:
                reader.fail(f"loads[{i}]", f"the same ranks_per_core and ranks_per_node as loads[{first}] "
                                           f"({load.describe()}); keep one")
        return cls(checked, data.get("mpi_library"), data.get("host"), data.get("source", ""), path)

    @classmethod
    def load(cls, path) -> Profile:
        """Read a profile file (:class:`ProfileError` if it is missing keys or has bad values)."""
        path = os.fspath(path)
        try:
            with open(path) as f:
                text = f.read()
        except OSError as error:
            raise ProfileError(f"{path}: cannot read the profile: {error.strerror}") from None
        except UnicodeDecodeError as error:
            raise ProfileError(f"{path}: not JSON: {error}") from None
        except ValueError as error:  # a NUL in the path
            raise ProfileError(f"{path!r}: cannot read the profile: {error}") from None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as error:  # JSONDecodeError, an int past Python's digit
            # limit, nesting too deep: a ProfileError, which wrap makes every rank raise
            raise ProfileError(f"{path}: not JSON: {error}") from None
        return cls.from_json(data, path)


class FileReader:
    """Checks one JSON file's dict (a profile; also a parameter file,
    :meth:`sparsecoll.model.params.Machine.from_json`), raising ``error`` that names the file and
    the key of the first bad value."""

    def __init__(self, path: str, error: type = ProfileError):
        self.path, self.error = path, error

    def fail(self, key: str, problem: str):
        """Raise the reader's error naming the file, ``key`` and ``problem``."""
        raise self.error(f"{self.path}: key {key!r}: {problem}")

    def mapping(self, value, key: str) -> dict:
        """``value`` if it is a JSON object, else the error for ``key``."""
        if not isinstance(value, dict):
            self.fail(key or "<top>", f"expected an object, got {type(value).__name__}")
        return value

    def known(self, data: dict, names, prefix: str) -> None:
        """The error for the first key of ``data`` not in ``names`` (a misspelt optional key would
        otherwise count as left out, and its default would stand in silently)."""
        for name in data:
            if name not in names:
                self.fail(f"{prefix}.{name}" if prefix else name, f"unknown key (expected one of {', '.join(names)})")

    def field(self, data: dict, name: str, prefix: str):
        """``data[name]``, else the error naming ``prefix.name`` as missing."""
        key = f"{prefix}.{name}" if prefix else name
        if name not in data:
            self.fail(key, "missing")
        return data[name]

    def number(self, data: dict, name: str, prefix: str, signed: bool = False) -> float:
        """``data[name]`` as a finite float (non-negative unless ``signed``, at most :data:`LARGEST_VALUE`)."""
        value = self.field(data, name, prefix)
        key = f"{prefix}.{name}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"expected a number, got {value!r}")
        if abs(value) > LARGEST_VALUE:  # (an int too large for a float included)
            self.fail(key, f"expected at most {LARGEST_VALUE:g} in size, got {value!r}")
        if not math.isfinite(value) or (value < 0 and not signed):
            self.fail(key, f"expected a finite {'' if signed else 'non-negative '}number, got {value!r}")
        return float(value)

    def family_factor(self, data: dict, name: str, prefix: str):
        """``data[name]``, optional (1): one :meth:`factor` for both families, or one per family."""
        if isinstance(data.get(name), dict):
            self.known(data[name], FAMILIES, f"{prefix}.{name}")
            return {family: self.factor(data[name], family, f"{prefix}.{name}") for family in FAMILIES}
        return self.factor(data, name, prefix) if name in data else 1.0  # Load spreads one number

    def factor(self, data: dict, name: str, prefix: str) -> float:
        """``data[name]`` as a number of at least 1."""
        value = self.number(data, name, prefix)
        if value < 1:
            self.fail(f"{prefix}.{name}", f"expected at least 1, got {value!r}")
        return value

    def per_form(self, data: dict, prefix: str) -> dict:
        """The ``per_call`` table of ``data``: a number per call form."""
        table = self.mapping(self.field(data, "per_call", prefix), f"{prefix}.per_call")
        self.known(table, FORMS, f"{prefix}.per_call")
        return {form: self.number(table, form, f"{prefix}.per_call") for form in FORMS}

    def load(self, entry, key: str) -> Load:
        """One load's entry of a profile, checked, as a :class:`Load`."""
        entry = self.mapping(entry, key)
        self.known(entry, LOAD_KEYS, key)
        levels = self.mapping(self.field(entry, "levels", key), f"{key}.levels")
        self.known(levels, LEVELS, f"{key}.levels")
        checked = {}
        for level in LEVELS:
            values = self.mapping(self.field(levels, level, f"{key}.levels"), f"{key}.levels.{level}")
            self.known(values, LEVEL_FIELDS + tuple(OPTIONAL_LEVEL_FIELDS), f"{key}.levels.{level}")
            checked[level] = {name: self.number(values, name, f"{key}.levels.{level}") for name in LEVEL_FIELDS}
            checked[level].update({name: self.number(values, name, f"{key}.levels.{level}")
                                   for name in OPTIONAL_LEVEL_FIELDS if name in values})  # Load fills the rest
        ours = self.mapping(self.field(entry, "sparsecoll", key), f"{key}.sparsecoll")
        library = self.mapping(self.field(entry, "native", key), f"{key}.native")
        self.known(ours, ("per_call", "per_step", "combined_factor", "byte_factor"), f"{key}.sparsecoll")
        self.known(library, ("per_call", "shortcut"), f"{key}.native")
        ranks_per_core = self.number(entry, "ranks_per_core", key)
        if ranks_per_core == 0:
            self.fail(f"{key}.ranks_per_core", "expected a positive number")
        combined, byte_factor = (self.family_factor(ours, name, f"{key}.sparsecoll")
                                 for name in ("combined_factor", "byte_factor"))
        rma = None
        if "rma" in entry:
            values = self.mapping(entry["rma"], f"{key}.rma")
            self.known(values, ("per_message", "byte_factor"), f"{key}.rma")
            rma = {"per_message": self.number(values, "per_message", f"{key}.rma", signed=True),
                   "byte_factor": self.number(values, "byte_factor", f"{key}.rma")}
            if rma["byte_factor"] == 0:
                self.fail(f"{key}.rma.byte_factor", "expected a positive number, got 0")
        ranks_per_node = None
        if "ranks_per_node" in entry:
            ranks_per_node = entry["ranks_per_node"]
            if not is_integer(ranks_per_node) or not 1 <= ranks_per_node <= LARGEST_VALUE:
                self.fail(f"{key}.ranks_per_node", f"expected a positive integer, got {ranks_per_node!r}")
        return Load(ranks_per_core, checked, self.per_form(ours, f"{key}.sparsecoll"),
                    self.number(ours, "per_step", f"{key}.sparsecoll"), self.per_form(library, f"{key}.native"),
                    combined, rma, ranks_per_node, byte_factor,
                    self.number(library, "shortcut", f"{key}.native") if "shortcut" in library else 0.0)


def _level(alpha: float, beta: float, overhead: float) -> dict:
    return {"alpha": alpha, "beta": beta, "overhead": overhead}


#: The profile used when none was calibrated: what ``sparsecoll calibrate`` measured on the
#: project's 2-core machine with MPICH 5.0.2 and Open MPI 5.0.11 (benchmarks/auto/profiles/), at
#: a rank per core and at 4 ranks per core, taking for each cost the side that favours the
#: library (sparsecoll's costs the larger, the library's the smaller, rounded), so that a
#: schedule must win clearly before it replaces the library's call. Its RMA costs are of the
#: same kind: the RMA study (benchmarks/rma, benchmarks/16core) measured the RMA executor at
#: 3.5-5.7 x the step executor at 16 B and 1.1-2.7 x at 1 MiB.
BUILTIN = Profile(
    loads=(
        Load(ranks_per_core=1.0,
             levels={"self": _level(0.0, 0.05e-9, 0.2e-6), "socket": _level(2e-6, 0.075e-9, 0.2e-6),
                     "node": _level(3e-6, 0.1e-9, 0.3e-6), "network": _level(5e-6, 1e-9, 0.5e-6)},
             sparsecoll_per_call={"blocking": 10e-6, "nonblocking": 18e-6, "persistent": 2e-6},
             sparsecoll_per_step=3e-6,
             native_per_call={"blocking": 2e-6, "nonblocking": 2.5e-6, "persistent": 0.3e-6},
             combined_factor=2.0, rma={"per_message": 5e-6, "byte_factor": 2.0}, native_shortcut=0.3e-6),
        Load(ranks_per_core=4.0,
             levels={"self": _level(0.0, 0.1e-9, 1e-6), "socket": _level(20e-6, 0.5e-9, 1e-6),
                     "node": _level(30e-6, 0.6e-9, 1.5e-6), "network": _level(40e-6, 1e-9, 2e-6)},
             sparsecoll_per_call={"blocking": 180e-6, "nonblocking": 200e-6, "persistent": 55e-6},
             sparsecoll_per_step=10e-6,
             native_per_call={"blocking": 60e-6, "nonblocking": 57e-6, "persistent": 21e-6},
             combined_factor=4.5, rma={"per_message": 20e-6, "byte_factor": 2.0}, native_shortcut=8e-6),
    ),
    source="built-in conservative profile (run `sparsecoll calibrate` for this machine's)",
)


def _log_ratio(a: float, b: float) -> float:
    """How far apart two positive quantities are, by ratio."""
    return abs(math.log(max(a, 1e-9) / max(b, 1e-9)))


def ranks_per_node(size: int, placement) -> int:
    """The ranks of a communicator of ``size`` ranks placed by ``placement`` on one node."""
    return min(size, placement.L * placement.S)


def ranks_per_core(size: int, placement, cores: int) -> float:
    """The load a communicator of ``size`` ranks placed by ``placement`` puts on the ``cores`` its
    ranks on this node may run on (:func:`sparsecoll.topology.placement.node_cores`)."""
    return ranks_per_node(size, placement) / max(cores, 1)


def library_name() -> str:
    """The running MPI library, as profiles name it: vendor and major.minor version."""
    from mpi4py import MPI
    vendor, version = MPI.get_vendor()
    return f"{vendor} {version[0]}.{version[1]}"


def library_version() -> str:
    """The running MPI library's version line (Open MPI 5.0's string ends in a NUL, dropped here)."""
    from mpi4py import MPI
    return MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0]


def default_path(host: str | None = None, library: str | None = None) -> str:
    """Where ``sparsecoll calibrate`` keeps the profile of ``host`` and ``library`` (these by default)."""
    import platformdirs
    host = host or platform.node() or "localhost"
    library = library or library_name()
    slug = "".join(c if c.isalnum() else "-" for c in f"{host}-{library}").strip("-").lower()
    return os.path.join(platformdirs.user_cache_dir("sparsecoll"), "profiles", f"{slug}.json")


def checked(profile: Profile) -> Profile:
    """``profile`` (a :class:`Profile` made in a program, not read from a file) if its values pass
    the checks a file's do, else :class:`ProfileError` naming the key (the profile is returned as
    it is: the check reads a copy)."""
    where = profile.path or "profile"
    try:
        data = profile.to_json()
    except (AttributeError, TypeError, ValueError) as error:  # loads that are not Load objects
        raise ProfileError(f"{where}: key 'loads': expected a tuple of Load, got {profile.loads!r:.80} "
                           f"({error})") from None
    Profile.from_json(data, where)
    return profile


def check_library(profile: Profile, library: str | None = None) -> Profile:
    """Raise :class:`ProfileError` if ``profile`` was measured with another MPI library."""
    library = library or library_name()
    if profile.mpi_library is not None and vendor(profile.mpi_library) != vendor(library):
        raise ProfileError(f"{profile.path or '<profile>'}: key 'mpi_library': the profile was measured with "
                           f"{profile.mpi_library!r}, this process runs {library!r}")
    return profile


def vendor(library: str) -> str:
    """``library`` (as :func:`library_name` writes it) without its version: a profile of another
    version of the same library is used (its parameters are this machine's)."""
    words = library.split()
    return " ".join(words[:-1] if words and re.fullmatch(r"\d+(\.\d+)*", words[-1]) else words)


def resolve(profile=None) -> Profile:
    """The profile in force: ``profile`` (a :class:`Profile`, a path or ``"builtin"``), else ``$SPARSECOLL_PROFILE``
    (a path or ``builtin``), else this host's calibrated file, else :data:`BUILTIN`."""
    if isinstance(profile, Profile):
        return check_library(checked(profile))
    if profile == "builtin":
        return BUILTIN
    if profile is not None:
        if not isinstance(profile, (str, os.PathLike)):
            raise ProfileTypeError(f"profile: expected a path or a Profile, got {type(profile).__name__}")
        if not os.fspath(profile):
            raise ProfileError("profile: an empty path (give a profile file, or 'builtin')")
        return check_library(Profile.load(profile))
    named = os.environ.get(ENVIRONMENT)
    if named:
        return BUILTIN if named == "builtin" else check_library(Profile.load(named))
    calibrated = default_path()
    if os.path.exists(calibrated):
        return check_library(Profile.load(calibrated))
    return BUILTIN
