"""User-defined placements the tests share: written only against the public ``ss.Placement`` API,
as a user would (a module of its own, importable from any test folder, like casedata)."""

import simshard as ss


class Cyclic(ss.Placement):
    """Round-robin: coordinate i holds i, i+k, i+2k, ... (interleaved)."""

    def __init__(self, dim):
        self.dim = dim

    def split(self, indices, num):
        return [indices[i::num] for i in range(num)]

    def __str__(self):
        return f"Cyclic({self.dim})"
