"""An exchange step's rounds planned only when something reads them.

The partitioner prices many candidate layouts per op (``copies.cost``) and emits one; a price
needs only the bytes each device receives, which for the exchange are exactly the elements of
its new block it lacks (``exchange.plan_exchange``'s ``minimum``, O(devices)). Its rounds, the
source chosen for each transfer (hence the bytes each device sends) and the emission data are
one transfer per (device, cell it lacks): about N^2 transfers on N devices for a reshard moving
mesh axes between dims, edge-coloured into rounds (minutes on thousands of devices). They are
planned once, on first use, by ``Deferred`` (the step's ``data``) and ``DeferredSent`` (its
``sent``), so a reshard that is priced but never emitted never plans them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Callable


class Deferred:
    """An exchange's ``ExchangeData`` and per-device sent bytes, computed by ``make`` on first
    use (``make`` returns ``(data, sent)``); reads as the data it stands for."""

    def __init__(self, make: Callable[[], tuple]):
        self.make = make

    @functools.cached_property
    def planned(self) -> tuple:
        """``(ExchangeData, sent bytes per device)``, planned once."""
        data, sent = self.make()
        self.make = None  # the closure holds the layouts: let them go
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


class DeferredSent(Mapping):
    """The bytes each device sends in a deferred exchange (planned on first read)."""

    def __init__(self, deferred: Deferred):
        self.deferred = deferred

    def __getitem__(self, device: int) -> int:
        return self.deferred.planned[1][device]

    def __iter__(self):
        return iter(self.deferred.planned[1])

    def __len__(self) -> int:
        return len(self.deferred.planned[1])
