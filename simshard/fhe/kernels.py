"""The channel-mixing kernel of one ciphertext block: the diagonal method and baby-step giant-step.

A 1x1 convolution on a channel-packed block is a matrix-vector product per pixel: output channel
``o`` is ``sum_c W[o, c] * input[c]``. The diagonal method computes it as
``sum_j diag_j * roll(input, j)`` over the matrix's generalised diagonals, one plaintext multiply
and one channel *roll* (a cyclic shift by ``j`` channel runs, within the block) per diagonal.

What a roll costs depends on the layout (the "rotation flush"): a CKKS rotation shifts all slots,
so the channels shifted off the front of a block land behind it, not at its back. If the block has
a copy of itself behind it (room for two copies; one rotation and an addition make it), one
rotation is the roll. If it has no room, the roll is two rotations whose results are masked to
the two parts and added: two more plaintext multiplies and one level.

Baby-step giant-step splits ``d = b * g`` diagonals: ``b`` rolls of the input (shared by every
group), one multiply per diagonal (the diagonals pre-rolled in plaintext), then one roll per group
of its partial sum. A partial sum has no copy of itself (the diagonals are masked to the block), so
its rolls are the two-rotation kind: one level more than the diagonal method. The plan chosen is
the one with the fewest rotations within the level budget, then fewest levels, multiplies and
rescales, then the squarer split.

A k x k convolution is the same kernel once per tap ``(dy, dx)``: the tap reads the input
shifted by ``dy*W + dx`` pixels within each channel's run, and a channel roll by ``j`` runs then
that shift is ONE rotation (by their sum), so every (diagonal, tap) pair is one roll of the
input: ``k*k*d`` rolls (the seed counts a 7x7 kernel's taps as 7*7=49 rotations) and ``k*k*d``
plaintext multiplies, at the same depth as the 1x1 kernel. The zero padding at the image's edges
(pixels whose tap falls outside the image, or wraps to the next row) is zeros in the tap's
plaintext diagonals, so it costs nothing. In BSGS the baby rolls are made per tap, the giant
rolls of the groups' sums once.

A rectangular block matrix (``n_out != n_in`` channels, powers of two) uses the hybrid layout: the
narrower side is tiled to the wider width ``w``, ``min(n_in, n_out)`` diagonals of length ``w``,
and a wide matrix folds its result with ``log2(n_in / n_out)`` rotate-and-add steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from .opcount import OpCount
from .params import CKKS, is_pow2, log2


@dataclass(frozen=True)
class Step:
    """One stage of a kernel, its operation count and why it is there."""

    name: str
    count: OpCount
    formula: str  # its rotations as written by hand, e.g. "16*2"
    note: str


@dataclass(frozen=True)
class KernelPlan:
    """How one ciphertext computes its block: the method, the layout and each step's cost."""

    method: str  # "diagonal" or "bsgs"
    copied: bool  # the input block has a copy of itself behind it (single-rotation rolls)
    diagonals: int
    baby: int  # rolls of the input (= diagonals for the diagonal method)
    giant: int  # rolls of partial sums (0 for the diagonal method)
    steps: tuple[Step, ...]

    @property
    def cost(self) -> OpCount:
        total = OpCount()
        for s in self.steps:
            total = total.then(s.count)
        return total

    def formula(self) -> str:
        """The rotations as a sum of the steps', e.g. ``1+8`` or ``16*2``."""
        return "+".join(s.formula for s in self.steps if s.count.rotations) or "0"

    def describe(self) -> str:
        how = "with a copy (1-rotation rolls)" if self.copied else "no room for a copy (2-rotation rolls)"
        if self.method == "bsgs":
            return f"baby-step giant-step {self.baby}x{self.giant}, {how}"
        return f"diagonal method, {self.diagonals} diagonals, {how}"


def _rolls(n: int, ckks: CKKS, taps: int = 1) -> tuple[int, str]:
    """Rolls by 0..n-1 channel runs, each combined with every one of a k x k kernel's ``taps``
    spatial shifts (a channel roll then a pixel shift is one rotation by their sum): ``taps*n``,
    less the zero roll when it is not counted; and how to write it (``9*16``)."""
    k = n * taps if ckks.count_zero_roll else n * taps - 1
    if taps == 1:
        return k, str(k)
    return k, f"{taps}*{n}" + ("" if ckks.count_zero_roll else "-1")


def _roll_step(name: str, rolls: tuple[int, str], copied: bool, per_rescale: bool) -> Step:
    """``k`` rolls: one rotation each with a copy, else two rotations, two masks, one level.
    ``per_rescale``: each masked roll is rescaled on its own (its result is multiplied next)."""
    k, written = rolls
    if k == 0:
        return Step(name, OpCount(), "0", "no roll")
    if copied:
        return Step(name, OpCount(rotations=k), written, f"{k} rolls of one rotation")
    return Step(name, OpCount(rotations=2 * k, pt_mults=2 * k, rescales=k if per_rescale else 1, levels=1),
                f"{written}*2", f"{k} rolls of two masked rotations")


def _layout_steps(n_in: int, n_out: int, copied: bool) -> tuple[Step, ...]:
    """Tiling a narrow input to the output width, and the copy for single-rotation rolls: each
    doubling is one rotation and one addition."""
    copies = max(1, n_out // n_in) * (2 if copied else 1)
    if copies == 1:
        return ()
    k = log2(copies)
    return (Step("copy input", OpCount(rotations=k), str(k), f"{copies} copies of the input block by doubling"),)


def _fold_steps(n_in: int, n_out: int) -> tuple[Step, ...]:
    if n_in <= n_out:
        return ()
    k = log2(n_in // n_out)
    return (Step("fold", OpCount(rotations=k), str(k), f"rotate-and-add {n_in // n_out} partial sums"),)


def diagonal(n_in: int, n_out: int, copied: bool, ckks: CKKS, taps: int = 1) -> KernelPlan:
    """The diagonal method for an ``n_out x n_in`` block matrix (channel counts, powers of two),
    once per kernel tap: ``taps`` = k*k for a k x k convolution (module docstring)."""
    d = min(n_in, n_out)
    steps = (*_layout_steps(n_in, n_out, copied),
             _roll_step("roll input", _rolls(d, ckks, taps), copied, per_rescale=True),
             Step("multiply diagonals", OpCount(pt_mults=d * taps, rescales=1, levels=1), "0",
                  f"{d * taps} plaintext diagonals"),
             *_fold_steps(n_in, n_out))
    return KernelPlan("diagonal", copied, d, d, 0, steps)


def bsgs(n_in: int, n_out: int, copied: bool, baby: int, ckks: CKKS, taps: int = 1) -> KernelPlan:
    """Baby-step giant-step with ``baby`` baby steps (a power of two dividing the diagonals); the
    baby rolls are made for each of ``taps`` kernel taps, the giant rolls of the groups' sums once."""
    d = min(n_in, n_out)
    giant = d // baby
    steps = (*_layout_steps(n_in, n_out, copied),
             _roll_step("baby rolls", _rolls(baby, ckks, taps), copied, per_rescale=True),
             Step("multiply diagonals", OpCount(pt_mults=d * taps, rescales=giant, levels=1),
                  "0", f"{d * taps} pre-rolled plaintext diagonals in {giant} groups"),
             _roll_step("giant rolls", _rolls(giant, ckks), False, per_rescale=False),
             *_fold_steps(n_in, n_out))
    return KernelPlan("bsgs", copied, d, baby, giant, steps)


def plans(n_in: int, n_out: int, width: int, slots: int, ckks: CKKS, taps: int = 1) -> tuple[KernelPlan, ...]:
    """Every plan for the block: with and (where there is room) without a copy, the diagonal
    method and each baby/giant split; ``width`` is the block's slot span at the wider side."""
    if not (is_pow2(n_in) and is_pow2(n_out)):
        raise ValueError(f"block channel counts must be powers of two, got {n_in} and {n_out}")
    if width > slots:
        raise ValueError(f"a block of {width} slots does not fit a ciphertext of {slots}")
    layouts = (False, True) if 2 * width <= slots else (False,)
    d = min(n_in, n_out)
    out = []
    for copied in layouts:
        out.append(diagonal(n_in, n_out, copied, ckks, taps))
        b = 2
        while b < d:
            out.append(bsgs(n_in, n_out, copied, b, ckks, taps))
            b *= 2
    return tuple(out)


def _order(p: KernelPlan) -> tuple:
    c = p.cost
    balance = abs(log2(p.baby) - log2(p.giant)) if p.giant else 0
    return (c.rotations, c.levels, c.pt_mults, c.rescales, balance)


def best_plan(n_in: int, n_out: int, width: int, slots: int, ckks: CKKS, taps: int = 1) -> KernelPlan:
    """The plan with the fewest rotations within ``ckks.level_budget`` (ties: fewer levels, then
    multiplies, rescales, then the squarer split); ValueError when none fits the budget."""
    within = [p for p in plans(n_in, n_out, width, slots, ckks, taps) if p.cost.levels <= ckks.level_budget]
    if not within:
        raise ValueError(f"a {n_out}x{n_in} block of {width} slots in {slots} needs more than "
                         f"{ckks.level_budget} level(s) (the level budget)")
    return min(within, key=_order)
