"""Ciphertext meshes (seed 003): the FHE compiler's ArraySharding spec, slot utilization, and the
CKKS cost of a layer on a ciphertext mesh (packing, kernel plans, per-ciphertext and total counts)."""

from .chooser import choose_mesh, rank_meshes
from .ckks import CipherMesh, ConvLayer, LayerCost, conv_cost
from .kernels import KernelPlan, best_plan
from .opcount import OpCount
from .packing import ChannelPacking
from .params import CKKS
from .utilization import Utilization, fhe_spec, utilization

__all__ = ["CKKS", "ChannelPacking", "CipherMesh", "ConvLayer", "KernelPlan", "LayerCost", "OpCount", "Utilization",
           "best_plan", "choose_mesh", "conv_cost", "rank_meshes", "fhe_spec", "utilization"]
