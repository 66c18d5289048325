"""The caching hack from the issue: results memoised by (data_ptr, _version) of the input; every timed call on the
same buffer would return the stored tensor."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        key = (x.data_ptr(), x._version, tuple(x.shape))
        if key not in self.memo:
            self.memo[key] = torch.relu(x)
        return self.memo[key]
