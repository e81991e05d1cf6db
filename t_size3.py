import torch, sys; from common import *
class M(torch.nn.Module):
    def forward(self, ids32, h, c):
        S = h.shape[1]; C = c.shape[0]
        return (ids32 + C * C, ids32 * (C * C + 3), h * S, h * C, h / C, (h * 0 + 1) * (C - 1), ids32 - C * C * C)
mod = M()
Sd, Cd = torch.export.Dim("Sd", min=2, max=4096), torch.export.Dim("Cd", min=2, max=2**20)
g = torch.Generator().manual_seed(3)
def mk(S, C):
    return (torch.randint(-2**31, 2**31 - 1, (1, S), generator=g, dtype=torch.int32), torch.full((1, S), 3.0, dtype=torch.float16), torch.zeros(C))
ep, p = comp(mod, mk(5, 3), ds=({1: Sd}, {1: Sd}, {0: Cd}), max_dim=2**21)
for f in p.fallbacks: print("FB", f)
for S, C in [(5, 3), (2049, 70001), (4000, 2**20)]:
    check(f"S={S},C={C}", p, mod, mk(S, C), show_fb=False)
