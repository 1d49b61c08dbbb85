"""CKKS operation counts: what one kernel step, one ciphertext or one layer performs.

Counts add up across steps and devices; ``levels`` is a depth, so it adds across the sequential
steps of one kernel and takes the maximum across devices that run side by side.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpCount:
    """Rotations (key switches), plaintext-ciphertext multiplies, rescales, ciphertext additions
    across ciphertexts, and the multiplicative levels consumed."""

    rotations: int = 0
    pt_mults: int = 0
    rescales: int = 0
    levels: int = 0
    ct_adds: int = 0

    def then(self, other: "OpCount") -> "OpCount":
        """This step followed by ``other`` on the same ciphertext: counts and levels add."""
        return OpCount(self.rotations + other.rotations, self.pt_mults + other.pt_mults,
                       self.rescales + other.rescales, self.levels + other.levels, self.ct_adds + other.ct_adds)

    def beside(self, other: "OpCount") -> "OpCount":
        """This and ``other`` on different ciphertexts at once: counts add, levels are the deeper."""
        return OpCount(self.rotations + other.rotations, self.pt_mults + other.pt_mults,
                       self.rescales + other.rescales, max(self.levels, other.levels),
                       self.ct_adds + other.ct_adds)

    def times(self, k: int) -> "OpCount":
        """``k`` copies side by side (``k`` devices running the same kernel)."""
        return OpCount(k * self.rotations, k * self.pt_mults, k * self.rescales,
                       self.levels if k else 0, k * self.ct_adds)
