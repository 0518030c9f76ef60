"""Tag channels: which MPI tag the messages of one collective call use.

Every message of one call carries the same tag, its channel. That is enough to match
them: between two ranks, both sides list the messages of a call in step order (a step
starts only when the previous one has completed on that rank), and MPI's
non-overtaking rule matches messages of one tag between one pair in that order. What
tags must separate are concurrent calls, so:

* channel 0 serves blocking calls (they run one at a time per communicator, in the same
  order on every rank), the size pass of persistent requests at init included;
* nonblocking calls cycle through channels ``1..NONBLOCKING_CHANNELS`` in call order (the
  same on every rank); before a call takes a channel, the previous call on it must have
  completed its messages *on this rank* (the engine waits for it if need be) unless that
  call posted all its messages when it started (one stage, as ``direct``'s). Either
  suffices: this rank's receives of the new call are posted only after every receive of
  the old one was posted (and, waited for, has matched), every peer posts the old call's
  sends on that tag before the new call's, and MPI matches the messages of one tag between
  two ranks in the order they were posted, so no message of one call can match a receive
  of the other. So one-stage calls never wait here: a rank may start any number of them
  before its peers start the first (MPI's nonblocking calls are local); a multi-step call
  may make the 65th call after it wait for its messages, which needs its peers' calls;
* persistent requests take the channels above, one each, in creation order. A channel
  whose earlier request is still alive on this rank is not reused: creating the request
  fails with an error naming the limit (the communicator's tag range).

All tags lie in ``0..TAG_UB`` of the private communicator (MPI guarantees at least 32767).

The channels also say whether a request still uses the private communicator (:meth:`Channels.busy`):
a nonblocking call not completed by its owner yet, or a persistent request not freed. The
communicator's ``Free`` waits for neither (MPI: "any pending operations that use this communicator
will complete normally"); its release runs when the last of them is done (:meth:`Channels.when_idle`).
"""

from __future__ import annotations

import weakref

from ..checks import tag_upper_bound
from .progress import wait_for_messages

#: Channels cycled by nonblocking calls.
NONBLOCKING_CHANNELS = 64


class Channels:
    """The tag channels of one private communicator."""

    def __init__(self, tag_ub):
        self.tag_ub = tag_upper_bound(tag_ub)
        self.first_persistent = 1 + NONBLOCKING_CHANNELS
        self.persistent_channels = self.tag_ub + 1 - self.first_persistent
        self._nonblocking_calls = 0
        self._persistent_calls = 0
        self._nonblocking = [None] * (NONBLOCKING_CHANNELS + 1)  # channel -> request of the last call
        self._outstanding: set = set()  # nonblocking calls not completed by their owner yet
        self._persistent: dict = {}  # channel -> weak reference to its live request
        self._on_idle = None  # what runs once no request uses the channels (see when_idle)

    def busy(self) -> bool:
        """Whether a nonblocking call has not been completed by its owner, or a persistent request is alive."""
        return bool(self._outstanding) or any(holder() is not None for holder in self._persistent.values())

    def when_idle(self, action) -> None:
        """Run ``action`` now if no request uses the channels, else once the last one is done."""
        if self.busy():
            self._on_idle = action
        else:
            action()

    def _released(self) -> None:
        action = self._on_idle
        if action is not None and not self.busy():
            self._on_idle = None
            action()

    def take_nonblocking(self) -> int:
        """The channel of the next nonblocking call, once this rank's previous call on it is done
        (or posted all its messages at its start). Called without the engine's lock, which the
        wait for that call must not hold where another thread may need it."""
        channel = 1 + self._nonblocking_calls % NONBLOCKING_CHANNELS
        self._nonblocking_calls += 1
        previous = self._nonblocking[channel]
        if previous is not None:
            self._nonblocking[channel] = None
            if not previous.one_stage:
                wait_for_messages(previous)
        return channel

    def hold_nonblocking(self, channel: int, request) -> None:
        """Record the request running on a nonblocking channel."""
        self._nonblocking[channel] = request
        self._outstanding.add(request)

    def release_nonblocking(self, channel: int, request) -> None:
        """The call on ``channel`` was completed by its owner."""
        if self._nonblocking[channel] is request:
            self._nonblocking[channel] = None
        if request in self._outstanding:
            self._outstanding.discard(request)
            if self._on_idle is not None:
                self._released()

    def take_persistent(self) -> int:
        """The channel of the next persistent request (raises if it is still held here)."""
        channel = self.first_persistent + self._persistent_calls % self.persistent_channels
        self._persistent_calls += 1
        holder = self._persistent.get(channel)
        if holder is not None and holder():  # alive and not freed
            raise RuntimeError(
                f"persistent request #{self._persistent_calls}: every one of the {self.persistent_channels} tag "
                f"channels of this communicator (TAG_UB {self.tag_ub}) was used since request "
                f"#{self._persistent_calls - self.persistent_channels}, which is still alive; Free() old "
                f"persistent requests")
        return channel

    def hold_persistent(self, channel: int, request) -> None:
        """Record the live persistent request on a channel."""
        self._persistent[channel] = weakref.ref(request)  # one dropped unfreed leaks its MPI requests, as in MPI

    def release_persistent(self, channel: int) -> None:
        """The persistent request on ``channel`` was freed."""
        self._persistent.pop(channel, None)
        if self._on_idle is not None:
            self._released()
