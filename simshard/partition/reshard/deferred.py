"""An exchange step's rounds planned only when something reads them.

The partitioner prices many candidate layouts per op (``copies.cost``) and emits one; a price
needs only the bytes each device receives, which for the exchange are exactly the elements of
its new block it lacks (``exchange.plan_exchange``'s ``minimum``, O(devices)). Its rounds, the
source chosen for each transfer (hence the bytes each device sends) and the emission data are
one transfer per (device, cell it lacks): about N^2 transfers on N devices for a reshard moving
mesh axes between dims, edge-coloured into rounds (minutes on thousands of devices).

They are worked out in two stages, each on first use. ``counted`` (``Counted``): the source of
each transfer and what follows from it alone, the bytes each device sends (``DeferredSent``),
how many rounds there are and which devices they name; the colouring has exactly as many rounds
as the busiest device has transfers (Koenig), so these need no rounds (where cells are relayed,
a broadcast, they are read off the planned rounds). ``planned``: the rounds and the emission
data. Pricing a step as the estimate times it (``autoshard.costs``) reads the first; emitting it,
the second; a reshard that is priced but never emitted never colours its transfers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Callable, NamedTuple


class Counted(NamedTuple):
    """What an exchange's transfers give before they are put in rounds: the bytes each device
    sends, the number of rounds and the devices named in them (sorted)."""

    sent: dict
    rounds: int
    devices: tuple[int, ...]


class Deferred:
    """An exchange's ``ExchangeData`` and per-device sent bytes: ``count`` gives the ``Counted``
    figures, ``make`` the planned ``(data, sent)``, each called once on first use; reads as the
    data it stands for."""

    def __init__(self, count: Callable[[], Counted], make: Callable[[], tuple]):
        self.count, self.make = count, make

    @functools.cached_property
    def counted(self) -> Counted:
        """The sent bytes, round count and devices named, without the rounds where possible."""
        counted = self.count()
        self.count = None  # the closure holds the layouts: let them go
        return counted

    @functools.cached_property
    def planned(self) -> tuple:
        """``(ExchangeData, sent bytes per device)``, planned once."""
        data, sent = self.make()
        self.make = None
        return data, sent

    @property
    def rank(self) -> int:
        return self.planned[0].rank

    @property
    def shapes(self) -> dict:
        return self.planned[0].shapes

    @property
    def local(self) -> dict:
        return self.planned[0].local

    @property
    def rounds(self) -> tuple:
        return self.planned[0].rounds

    @property
    def view(self):
        return self.planned[0].view

    @property
    def round_count(self) -> int:
        return self.counted.rounds

    @property
    def pair_devices(self) -> tuple[int, ...]:
        return self.counted.devices


class DeferredSent(Mapping):
    """The bytes each device sends in a deferred exchange (counted on first read)."""

    def __init__(self, deferred: Deferred):
        self.deferred = deferred

    def __getitem__(self, device: int) -> int:
        return self.deferred.counted.sent[device]

    def __iter__(self):
        return iter(self.deferred.counted.sent)

    def __len__(self) -> int:
        return len(self.deferred.counted.sent)
