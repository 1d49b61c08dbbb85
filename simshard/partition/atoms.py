"""Moved to ``simshard.partition.reshard.atoms`` (the reshard planner is one package now).

This module re-exports its public names.
"""

from .reshard.atoms import Atom, State, atom_groups, atoms_of, refine, sorted_atoms  # noqa: F401

__all__ = ["Atom", "State", "atom_groups", "atoms_of", "refine", "sorted_atoms"]
