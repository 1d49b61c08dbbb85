"""Channel packing: how one block of a [C, H, W] activation sits in one ciphertext's slots.

Each channel's ``H*W`` pixels take a power-of-two run of slots (49 pixels -> 64 slots), and the
block's channels take a power-of-two count of such runs, channel after channel. Powers of two
make every channel roll a rotation by a multiple of the run and keep blocks aligned when a block
is copied next to itself. A block *fills* its ciphertext when it takes more than half the slots:
then it has no room for a second copy, and a cyclic roll of it cannot be one rotation (see
kernels.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .params import pow2_ceil


@dataclass(frozen=True)
class ChannelPacking:
    """``channels`` channels of ``pixels`` values each, in a ciphertext of ``slots`` slots."""

    channels: int
    pixels: int
    slots: int

    def __post_init__(self):
        if self.channels < 1 or self.pixels < 1:
            raise ValueError(f"a packed block needs channels and pixels, got {self.channels} x {self.pixels}")

    @property
    def run(self) -> int:
        """Slots per channel: ``pixels`` rounded up to a power of two."""
        return pow2_ceil(self.pixels)

    @property
    def channel_slots(self) -> int:
        """Channel count rounded up to a power of two."""
        return pow2_ceil(self.channels)

    @property
    def width(self) -> int:
        """Slots the block spans, padding included."""
        return self.channel_slots * self.run

    @property
    def fits(self) -> bool:
        return self.width <= self.slots

    @property
    def has_room_for_copy(self) -> bool:
        """The block and a second copy of it fit: its cyclic rolls can be single rotations."""
        return 2 * self.width <= self.slots

    @property
    def used(self) -> int:
        """Slots holding data (not padding)."""
        return self.channels * self.pixels

    @property
    def utilization(self) -> float:
        """Data slots over the ciphertext's slots."""
        return self.used / self.slots
