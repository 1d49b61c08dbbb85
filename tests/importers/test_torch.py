"""ss.from_torch: torch.export's core ATen graph bound as registry ops, parameters sharded by
DTensor placements or a parallelize_module plan, checked against numpy and PyTorch's own output."""

import numpy as np
import pytest

import simshard as ss
from simshard.importers import UnsupportedOpError

MESH = ss.Mesh({"dp": 2, "tp": 4})


def integer_valued(module, torch, seed=0):
    """The module with weights in {-1, 0, 1}: its contractions then add integers (exact, any order)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randint(-1, 2, p.shape, generator=gen).to(p.dtype))
    return module


def test_transformer_ops_match_torch(torch):
    """Embedding, MultiheadAttention, layer norm, GELU (erf), scaled dot-product attention, softmax,
    dropout (eval) and cross-entropy, sharded by a plan and placements."""
    nn, F = torch.nn, torch.nn.functional
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    class Block(nn.Module):
        def __init__(self, d=16, h=4, v=32):
            super().__init__()
            self.emb, self.attn = nn.Embedding(v, d), nn.MultiheadAttention(d, h, batch_first=True)
            self.ln1, self.ln2, self.fc1, self.fc2, self.out = (nn.LayerNorm(d), nn.LayerNorm(d), nn.Linear(d, 4 * d),
                                                                nn.Linear(4 * d, d), nn.Linear(d, v))

        def forward(self, ids, labels):
            x = self.emb(ids)
            x = self.ln1(x + self.attn(x, x, x, need_weights=False)[0])
            x = self.ln2(x + self.fc2(F.gelu(self.fc1(x))))
            q = x.view(4, 8, 4, 4).transpose(1, 2)
            x = x + F.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(4, 8, 16)
            logits = self.out(F.dropout(x, 0.1, training=self.training))
            return F.cross_entropy(logits.reshape(-1, 32), labels.reshape(-1)), F.softmax(logits, -1)

    torch.manual_seed(0)
    model = integer_valued(Block(), torch).eval()
    ids, labels = torch.randint(0, 32, (4, 8)), torch.randint(0, 32, (4, 8))
    f = ss.from_torch(model, (ids, labels), {"ids": [Shard(0), Replicate()], "labels": "[S(0), R]"},
                      plan={"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}, mesh=MESH)
    program = f.trace(*f.arguments)
    specs = dict(zip(program.input_names, program.in_shardings))
    assert str(specs["params['fc1.weight']"]) == '<@mesh, [{"tp"}, {}]>'
    assert str(specs["params['fc2.weight']"]) == '<@mesh, [{}, {"tp"}]>'
    res = ss.run(f, *f.arguments, backend="local")
    assert res.verify.ok, res.verify.render()  # bitwise, or sums split over mesh axes reassociated
    assert len(res.verify.framework) == 2 and all(c.ok and not c.exact for c in res.verify.framework)
    assert any(r.kind == "all_reduce" for r in res.comm.records)  # the row-parallel fc2's partial sums


def test_exact_module_is_bitwise_against_torch(torch):
    nn = torch.nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

        def forward(self, x):
            h = torch.relu(self.fc1(x))
            return self.fc2(h).sum(dim=0), torch.cat([h[:, :4], h[:, 4:8] * 2 - 1], dim=1).amax(dim=1)

    model = integer_valued(MLP(), torch)
    x = torch.randint(-2, 3, (8, 16)).float()
    f = ss.from_torch(model, (x,), {"x": [ss.Shard(0)]}, mesh=ss.Mesh({"x": 8}))
    res = ss.run(f, *f.arguments, backend="local")
    assert res.verify.ok and all(c.exact and c.check.bitwise for c in res.verify.framework), res.verify.render()


def test_function_and_unmapped_op_named_with_the_line(torch):
    f = ss.from_torch(lambda x: torch.cumprod(x, 0), (torch.ones(4),), mesh=ss.Mesh({"x": 2}))
    with pytest.raises(UnsupportedOpError, match=r"PyTorch op 'cumprod.default'.*test_torch.py:\d+"):
        f.trace(*f.arguments)


def test_placement_naming_nothing_is_refused(torch):
    with pytest.raises(ss.ShardingError, match="fc9.weight"):
        ss.from_torch(torch.nn.Linear(4, 4), (torch.ones(2, 4),), {"fc9.weight": [ss.Shard(0)]}, mesh=ss.Mesh({"x": 2}))


def test_gpt_style_ops(torch):
    """Position ids (arange), a causal mask (tril buffer, masked_fill, bitwise_not), SiLU, chunk,
    clamp, max.dim, index_select and cumsum."""
    nn, F = torch.nn, torch.nn.functional

    class GPT(nn.Module):
        def __init__(self, v=32, d=16, t=8):
            super().__init__()
            self.tok, self.pos = nn.Embedding(v, d), nn.Embedding(t, d)
            self.fc, self.out = nn.Linear(d, 2 * d), nn.Linear(d, v)
            self.register_buffer("mask", torch.tril(torch.ones(t, t, dtype=torch.bool)))

        def forward(self, ids):
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
            att = (x @ x.transpose(-1, -2)).masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
            x = x + att @ x
            a, b = self.fc(x).chunk(2, dim=-1)
            logits = self.out(x + F.silu(a) * b.clamp(-3, 3))
            return logits.max(dim=-1).values, torch.index_select(logits, 2, torch.tensor([0, 5])), logits.cumsum(1)

    model = integer_valued(GPT(), torch)
    f = ss.from_torch(model, (torch.randint(0, 32, (4, 8)),), {"ids": [ss.Shard(0)]}, mesh=ss.Mesh({"x": 4}))
    res = ss.run(f, *f.arguments, backend="local")
    # every op checks against its kernel on each device's own operands; the outputs may still differ
    # from numpy's whole run where a BLAS blocks a device's smaller matmul otherwise (no op is wrong)
    assert not res.verify.wrong_ops, res.verify.render()
    assert len(res.verify.framework) == 3 and all(c.ok for c in res.verify.framework), res.verify.render()
