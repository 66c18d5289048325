# Attack class: a memo on nearby values, exact. Plain ModelNew code (no runner patch): the first timed call of each
# base set is kept as an anchor with, for argmax(x @ W), the columns that could still win a row for any input within
# the nudge's radius of it (|d logit_j| <= sum_k r |a_k W_kj|); a later call within that radius computes only those
# logits (near ties: the whole product). At a nudge of 2^-5 it was exact on every input and read 2.6-2.8x (red team,
# session 27). Stopped by: a nudge of 0.25 (judging/judge.NUDGE), which leaves the bound nothing to prune.
import torch
import torch.nn as nn

RADIUS = 2.0 ** -4 / (1 - 2.0 ** -5) * (1 + 1e-4)
ANCHORS_MAX = 8


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(64, 8192))
        self.anchors = []

    def _anchor(self, x):
        W = self.weight.detach()
        tol = RADIUS * x.abs()
        logits = x @ W
        radius = tol @ W.abs() + 1e-3
        low = (logits - radius).max(dim=1, keepdim=True).values
        cand = (logits + radius) >= low
        k = int(cand.sum(dim=1).max())
        if k > W.shape[1] // 8:
            return  # not worth it for this input
        order = torch.argsort((~cand).to(torch.int8), dim=1, stable=True)[:, :k]
        valid = torch.gather(cand, 1, order)
        idx = torch.where(valid, order, order[:, :1].expand_as(order))
        self.anchors = (self.anchors + [(x.clone(), tol, idx, W.t()[idx].contiguous(), ~valid)])[-ANCHORS_MAX:]

    def forward(self, x):
        for base, tol, idx, wg, pad in self.anchors:
            if x.shape == base.shape and bool(((x - base).abs() <= tol).all()):
                logits = torch.bmm(wg, x.unsqueeze(-1)).squeeze(-1).masked_fill_(pad, float("-inf"))
                if logits.shape[1] > 1:
                    top2 = logits.topk(2, dim=1).values
                    if bool(((top2[:, 0] - top2[:, 1]) < 2e-4).any()):
                        break  # a near tie: computed as the reference computes it
                return torch.gather(idx, 1, logits.argmax(dim=1, keepdim=True)).squeeze(1)
        out = torch.argmax(x @ self.weight, dim=1)
        if x.dim() == 2 and x.shape[1] == self.weight.shape[0]:
            self._anchor(x.detach())
        return out
