"""What a wrapper asks for (:class:`Plan`) and what one collective of it runs (:class:`CallPlan`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType

from .. import algorithms, execute
from ..model.choice import split_candidate
from ..model.params import LOGGP_FILE_OPTION, with_loggp_file
from ..model.profile import BUILTIN, Profile, ProfileTypeError
from ..model.profile import resolve as resolve_profile
from .persistence import BLOCK_BYTES_OPTION, NONE, Persistence

#: ``verify_choice`` as the integer the ranks agree on (:meth:`Plan.verify_code`).
VERIFY_CODES = {False: 0, None: 1, True: 2}


@dataclass(frozen=True)
class Plan:
    """A wrapper's request: algorithm (``"auto"`` or registered), checked options, rebind, executor
    and its options, and the persistence level of its info keys (:mod:`sparsecoll.runtime.persistence`).

    ``key`` identifies everything that shapes the messages, by value, so it is the same
    on every rank: the algorithm, every option but ``loggp`` (a file's path, which each rank may
    give its own copy of: the L, o and G read from it are options), the executor, whether
    ``cdag_exact_byte_communications`` is set (it changes auto's choice and puts a check
    on every call), for ``auto``, whether ``cdag_static_buffers`` is (auto then also
    considers the RMA executor), and the executor's options. ``profile`` and ``verify_choice`` are ``auto``'s
    (:mod:`sparsecoll.runtime.auto`); they shape only what auto decides, and each rank may read
    its own host's profile, so they are not compared between ranks; an ``auto`` key holds instead
    ``decided_by``, what every rank learnt of them from wrap's allreduce
    (:meth:`with_agreed_inputs`), so that a later wrap with another profile decides anew. Neither is
    ``cdag_strict_communication``, which only moves set-up to ``wrap``, nor
    ``cdag_static_buffers`` for a named algorithm, where it is only recorded.
    """

    algorithm: str
    options: MappingProxyType
    rebind: bool = False
    executor: str = execute.DEFAULT_EXECUTOR
    profile: Profile = BUILTIN
    verify_choice: bool | None = None
    persistence: Persistence = NONE
    executor_options: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    decided_by: tuple = ()
    key: tuple = field(init=False)
    native: bool = field(init=False)

    def __post_init__(self):
        shaping = tuple((name, repr(value)) for name, value in sorted(self.options.items())
                        if name != LOGGP_FILE_OPTION)
        executing = tuple(sorted(self.executor_options.items()))
        object.__setattr__(self, "key", (self.algorithm, shaping, self.executor, self.persistence.exact_bytes,
                                         self.persistence.static_buffers and self.auto, executing,
                                         self.decided_by if self.auto else ()))
        runs_library = self.algorithm != algorithms.AUTO and algorithms.get(self.algorithm).runs_library
        object.__setattr__(self, "native", runs_library)

    @property
    def auto(self) -> bool:
        """Whether the cost model picks the algorithm per call (``"auto"``)."""
        return self.algorithm == algorithms.AUTO

    @property
    def checks_choices(self) -> bool:
        """Whether auto times its non-native choices against ``native``: blocking ones online, a
        persistent request's in its first starts (the default, ``verify_choice`` None, and True;
        :mod:`sparsecoll.runtime.auto`)."""
        return self.auto and self.verify_choice is not False

    @property
    def tries_near_misses(self) -> bool:
        """Whether auto also checks, in a persistent request's first starts, the candidate the model
        predicts nearly as fast as ``native`` where it chose ``native`` (``verify_choice=True`` only)."""
        return self.auto and self.verify_choice is True

    def verify_code(self) -> int:
        """``verify_choice`` as an integer (False 0, None 1, True 2), for the ranks' agreement."""
        return VERIFY_CODES[self.verify_choice]

    def decision_inputs(self) -> tuple:
        """This rank's inputs of auto's decisions that ranks may hold differently (the profile's
        fingerprint, ``verify_choice``), as integers for wrap's allreduce; empty for other plans."""
        if not self.auto:
            return ()
        return (self.profile.fingerprint(), self.verify_code())

    @property
    def profiles_differ(self) -> bool:
        """Whether the ranks' profiles differ (from ``decided_by``: the same on every rank)."""
        return bool(self.decided_by) and self.decided_by[0][0] != self.decided_by[0][1]

    def with_agreed_inputs(self, agreed: tuple) -> Plan:
        """This plan with ``decided_by`` set to ``agreed`` (the same on every rank: the lowest and
        highest of each of :meth:`decision_inputs` over the ranks)."""
        return self if agreed == self.decided_by else replace(self, decided_by=tuple(agreed))

    def sized(self, largest_block: int | None, given: dict) -> Plan:
        """Under ``cdag_exact_byte_communications``: the plan whose build assumes the weights'
        largest block (``largest_block``, agreed by every rank) where its algorithm has a
        block-size option the user did not give; else this plan."""
        if (largest_block is None or largest_block < 1 or self.auto or BLOCK_BYTES_OPTION in given
                or BLOCK_BYTES_OPTION not in algorithms.get(self.algorithm).options):
            return self
        return replace(self, options=MappingProxyType({**self.options, BLOCK_BYTES_OPTION: int(largest_block)}))

    def resolved(self, candidate: str) -> Plan:
        """The plan that runs ``auto``'s ``candidate`` with this plan's options: an algorithm name, or
        ``"name[rma]"`` for that algorithm on the RMA executor (:func:`sparsecoll.model.choice.split_candidate`)."""
        algorithm, executor = split_candidate(candidate)
        return replace(self, algorithm=algorithm, executor=executor or self.executor)


def make_plan(algorithm: str, options: dict, rebind: bool, size: int,
              executor: str = execute.DEFAULT_EXECUTOR, profile=None, verify_choice: bool | None = None,
              persistence: Persistence = NONE, executor_options=None) -> Plan:
    """Check a wrapper's arguments (raising before any message is sent) and make its Plan.

    ``profile``: ``auto``'s profile (a path or a Profile; default: see
    :func:`sparsecoll.model.profile.resolve`), read here so a bad file raises at ``wrap``.
    ``persistence``: the level of the wrapper's info keys (:func:`.persistence.level`).
    """
    algorithms.check_name(algorithm)
    checked_executor_options = execute.check_options(executor, executor_options)
    if not isinstance(rebind, bool):
        raise TypeError(f"rebind: expected a bool, got {type(rebind).__name__}")
    if verify_choice is not None and not isinstance(verify_choice, bool):
        raise TypeError(f"verify_choice: expected a bool or None, got {type(verify_choice).__name__}")
    if algorithm != algorithms.AUTO and profile is not None:
        raise ProfileTypeError(f"profile: only algorithm='auto' chooses by a profile; {algorithm!r} runs as named")
    if algorithm != algorithms.AUTO and verify_choice:
        raise TypeError(f"verify_choice: only algorithm='auto' makes a choice to verify; {algorithm!r} runs as named")
    checked = algorithms.check_options(algorithm, with_loggp_file(options), size)
    chosen_profile = resolve_profile(profile) if algorithm == algorithms.AUTO else BUILTIN
    return Plan(algorithm, MappingProxyType(dict(checked)), rebind, executor, chosen_profile, verify_choice,
                persistence, MappingProxyType(checked_executor_options))


@dataclass(frozen=True, slots=True, eq=False)
class CallPlan:
    """One collective of one Plan on one communicator: the pattern and whether calls need a size pass.

    ``size_pass`` is agreed by every rank when the pattern is first used by a collective
    call. The runtime makes one CallPlan per Plan key (algorithm and options), rebind and
    collective, so the object itself (compared by identity) keys its caches. ``runtime`` runs
    its calls (the handle's CommRuntime, or the check of ``cdag_exact_byte_communications`` in
    front of it); ``make_executor(comm, schedule, tag)`` makes the executor of a bound Schedule
    (an executor class, or the RMA executors' factory over their window).
    """

    collective: str
    algorithm: str
    pattern: object
    size_pass: bool
    rebind: bool
    runtime: object
    make_executor: object
