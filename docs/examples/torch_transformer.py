"""A PyTorch model around ``nn.TransformerEncoderLayer`` (embedding, pre-norm self-attention and
GELU MLP, a vocabulary head, cross-entropy), eval mode (dropout off), with a tensor-parallel plan
as ``parallelize_module`` takes it: the MLP and head by columns and rows over ``tp``, the batch
over ``dp``. Everything above the ``simshard`` lines is plain PyTorch; simshard reads
``torch.export``'s graph (docs/import.md).

    simshard run docs/examples/torch_transformer.py
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

SMALL = dict(batch=4, seq=8, d=32, heads=4, ff=64, vocab=64)
LARGE = dict(batch=256, seq=1024, d=2048, heads=16, ff=8192, vocab=32768)


class Model(nn.Module):
    def __init__(self, vocab, d, heads, ff):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation="gelu", batch_first=True,
                                                norm_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, labels):
        logits = self.head(self.layer(self.emb(ids)))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


# the tensor-parallel plan over "tp", as parallelize_module(model, mesh["tp"], PLAN) takes it
PLAN = {"layer.linear1": ColwiseParallel(), "layer.linear2": RowwiseParallel(),
        "layer.self_attn.out_proj": RowwiseParallel(), "head": ColwiseParallel()}
# DTensor placements on the (dp, tp) mesh for what the plan does not cover: the packed QKV
# projection by rows over tp (heads), the batch over dp
PLACEMENTS = {"layer.self_attn.in_proj_weight": [Replicate(), Shard(0)],
              "layer.self_attn.in_proj_bias": [Replicate(), Shard(0)],
              "ids": [Shard(0), Replicate()], "labels": [Shard(0), Replicate()]}


def model_and_inputs(size=SMALL, device="cpu", seed=0):
    torch.manual_seed(seed)
    with torch.device(device):
        model = Model(size["vocab"], size["d"], size["heads"], size["ff"]).eval()
        ids = torch.randint(0, size["vocab"], (size["batch"], size["seq"]))
        labels = torch.randint(0, size["vocab"], (size["batch"], size["seq"]))
    return model, (ids, labels)


# -- simshard -------------------------------------------------------------------------------------
import simshard as ss  # noqa: E402
from simshard.programs import ProgramDef, Strategy  # noqa: E402


def imported(mesh, size=SMALL, device="cpu"):
    model, inputs = model_and_inputs(size, device)
    return ss.from_torch(model, inputs, PLACEMENTS, plan=PLAN, mesh=mesh)


def run(size=SMALL, backend="local"):
    """The model on 8 devices (dp=2, tp=4): verified bit for bit and against PyTorch."""
    f = imported(ss.Mesh({"dp": 2, "tp": 4}), size)
    return ss.run(f, *f.arguments, backend=backend)


def estimate(size=LARGE, dp=128, tp=8):
    """What the forward pass costs on dp × tp devices (1,024 by default): the model built on
    PyTorch's meta device (shapes, no memory), so its arguments are shapes."""
    f = imported(ss.Mesh({"dp": dp, "tp": tp}), size, device="meta")
    return ss.estimate(f, *f.arguments)


_SMALL = imported(ss.Mesh({"dp": 2, "tp": 4}))
PROGRAM = ProgramDef(
    name="torch_transformer", about="nn.TransformerEncoderLayer with a tensor-parallel plan, imported with ss.from_torch",
    fn=_SMALL, inputs=lambda: _SMALL.arguments, mesh={"dp": 2, "tp": 4},
    strategies=(Strategy("tp-plan", "the plan and placements of the PyTorch code: batch over dp, Megatron over tp",
                         build=lambda mesh: imported(mesh)),),
)
