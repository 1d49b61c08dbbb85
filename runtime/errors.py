"""Errors of a run: each names the device and the instruction it was at."""

from __future__ import annotations


class ExecutionError(RuntimeError):
    """A device could not run an instruction of its schedule."""

    def __init__(self, message: str, *, device: int | None = None, position: int | None = None,
                 instr: int | None = None, source: str = ""):
        super().__init__(message)
        self.device = device
        self.position = position
        self.instr = instr
        self.source = source

    def __reduce__(self):
        # Rebuilt without calling __init__ (subclasses take required keywords), so an error
        # raised on a Ray device actor reaches the driver whole.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls, args, state):
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class DeviceLostError(ExecutionError):
    """A device's process died (its Ray actor is gone) during a run. ``instr`` / ``position``:
    the instruction its peers were waiting for it to reach, when known; ``positions``: where
    every surviving device was; ``lost``: every device whose actor died; ``attempts``: how many
    times the run was tried (``retries=N``: up to N + 1)."""

    def __init__(self, message: str, *, positions: dict | None = None, lost: tuple = (), attempts: int = 1, **kw):
        super().__init__(message, **kw)
        self.positions = dict(positions or {})
        self.lost = tuple(lost)
        self.attempts = attempts


class ScheduleMismatchError(ExecutionError):
    """Devices' schedules disagree: one waits for a collective another never reaches, reaches a
    different one, or sends a message nobody receives. ``positions`` maps each device involved to
    where it was (a readable description)."""

    def __init__(self, message: str, *, devices: tuple[int, ...] = (), positions: dict | None = None, **kw):
        super().__init__(message, **kw)
        self.devices = tuple(devices)
        self.positions = dict(positions or {})


class PeerTimeoutError(ScheduleMismatchError):
    """A device waited longer than the timeout for a peer's message."""


class CollectiveError(ExecutionError):
    """A collective got data it cannot combine (shapes or dtypes that disagree, bad splits, a
    device outside its group)."""


class DeviceOutOfMemoryError(ExecutionError, MemoryError):
    """A device's live buffers exceeded its ``device_memory`` capacity, as a real device would."""

    def __init__(self, message: str, *, needed: int, capacity: int, **kw):
        super().__init__(message, **kw)
        self.needed = needed
        self.capacity = capacity
