"""The CKKS parameters a layer is priced under: ring degree, slots, level budget, counting rule.

A ciphertext of ring degree ``N`` holds ``N/2`` complex slots; a slot rotation is one key switch
(the expensive operation), a plaintext-ciphertext multiply consumes one level after its rescale.
The level budget is how many levels one layer may consume: it decides whether baby-step
giant-step (one level more than the diagonal method) is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass


def is_pow2(n: int) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def pow2_ceil(n: int) -> int:
    """The least power of two >= ``n`` (``n`` >= 1)."""
    if n < 1:
        raise ValueError(f"pow2_ceil needs a positive count, got {n}")
    return 1 << (n - 1).bit_length()


def log2(n: int) -> int:
    """log2 of a power of two."""
    assert is_pow2(n), n
    return n.bit_length() - 1


@dataclass(frozen=True)
class CKKS:
    """A CKKS parameter set: ring degree ``ring_degree`` (``N``), its ``slots`` (``N/2``), the levels
    a layer may consume, and whether a roll by zero counts as a roll.

    ``count_zero_roll`` is the seed document's convention: a kernel over ``d`` diagonals performs
    ``d`` rolls, the zero shift included, as a uniform kernel loop does. False counts only the
    rotations a kernel that skips the zero shift performs.
    """

    ring_degree: int
    level_budget: int = 2
    count_zero_roll: bool = True

    def __post_init__(self):
        if not is_pow2(self.ring_degree) or self.ring_degree < 2:
            raise ValueError(f"CKKS ring degree N must be a power of two >= 2, got {self.ring_degree!r}")
        if not isinstance(self.level_budget, int) or self.level_budget < 1:
            raise ValueError(f"CKKS level budget must be a positive integer, got {self.level_budget!r}")

    @property
    def slots(self) -> int:
        return self.ring_degree // 2

    @classmethod
    def with_slots(cls, slots: int, **kw) -> "CKKS":
        """The parameter set whose ciphertexts hold ``slots`` slots (``N = 2 * slots``)."""
        if not is_pow2(slots):
            raise ValueError(f"CKKS slots must be a power of two, got {slots!r}")
        return cls(2 * slots, **kw)

    def __str__(self) -> str:
        return f"N={_k(self.ring_degree)}, S={_k(self.slots)}"


def _k(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)
