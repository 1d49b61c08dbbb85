"""Ciphertext meshes (seed 003): the FHE compiler's ArraySharding spec and slot utilization."""

from .utilization import Utilization, fhe_spec, utilization

__all__ = ["Utilization", "fhe_spec", "utilization"]
