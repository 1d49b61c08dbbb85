"""The search's shared-read rows, substituted so that they can be left out and added as cuts.

A pair of layouts several reads of a value can move is priced once, on a continuous ``u >= 0``
bounded below by each read's terms, ``u >= t_r(x)`` (``reads.Reads.price``: a *shared row*; on an
8 x 32 x 32 mesh 823,873 of the 7B step's 876,459 rows). With them all, HiGHS's dual simplex
takes minutes. Substitute ``u = z + avg(t)`` (``avg``: the mean of the group's ``t_r``), an
exact change of variables:

    cost  P u  =  P z + P avg(t)           (the price spread over the reads' terms),
    row   u >= t_r   <=>   z + avg(t) - t_r >= 0,
    and   z >= 0 holds at every solution (u >= max t_r >= avg(t)).

Without the rows (``z = 0``) this is a relaxation: the reads share the price evenly. A solution
of it that satisfies every substituted row is feasible for the whole program; ``colgen`` adds
the rows it violates as cuts (``Shared.cuts``), and gives each ``u`` back as ``z + avg(t)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np




class Shared(NamedTuple):
    """The shared rows: their indices, each one's ``u`` (a column), the groups' ``u``, the group
    of each row, the groups' mean terms (groups x variables) and the substituted rows (rows x
    variables, ``z`` in ``u``'s column: each >= 0)."""

    rows: np.ndarray
    u: np.ndarray
    groups: np.ndarray
    group: np.ndarray
    mean: object
    cuts: object


def shared_columns(a, lb, ub, integer) -> tuple[np.ndarray, np.ndarray]:
    """The columns ``u`` (continuous, a +1 in rows ``0 <= . < inf`` and nowhere else) and, per
    row, its ``u`` (-1: none) where all its other entries are negative (``u >= t_r``)."""
    coo = a.tocoo()
    candidate = (lb == 0) & np.isinf(ub)
    plus = (coo.data == 1) & (integer[coo.col] == 0) & candidate[coo.row]
    count = np.bincount(coo.col[plus], minlength=a.shape[1])
    is_u = (count > 0) & (count == np.bincount(coo.col, minlength=a.shape[1]))
    mine = plus & is_u[coo.col]
    of_row = np.full(a.shape[0], -1, dtype=np.int64)
    of_row[coo.row[mine]] = coo.col[mine]
    ones = np.bincount(coo.row[mine], minlength=a.shape[0])
    bad = np.bincount(coo.row[~mine & (coo.data >= 0)], minlength=a.shape[0])
    of_row[(ones != 1) | (bad > 0) | ~candidate] = -1
    return is_u, of_row


def shared_rows(a, lb, ub, integer) -> Shared | None:
    """The shared rows of ``a`` (CSR) and their substitution (module docstring); None where a
    ``u`` has a row of another form."""
    from scipy.sparse import csr_array

    is_u, of_row = shared_columns(a, lb, ub, integer)
    rows = np.flatnonzero(of_row >= 0)
    if np.any(is_u & ~np.isin(np.arange(len(is_u)), of_row[rows])):
        return None  # a u with a row of another form: not the search's structure
    u = of_row[rows]
    coo = a[rows].tocoo()
    keep = coo.col != u[coo.row]
    terms = csr_array((-coo.data[keep], (coo.row[keep], coo.col[keep])), shape=coo.shape)  # t_r
    groups, group, count = np.unique(u, return_inverse=True, return_counts=True)
    mean = csr_array((1.0 / count[group], (group, np.arange(len(rows)))), shape=(len(groups), len(rows))) @ terms
    z = csr_array((np.ones(len(rows)), (np.arange(len(rows)), u)), shape=coo.shape)
    cuts = (mean[group] - terms + z).tocsr()
    cuts.sum_duplicates()
    return Shared(rows, u, groups, group, mean.tocsr(), cuts)


__all__ = ["Shared", "shared_columns", "shared_rows"]
