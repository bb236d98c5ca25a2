import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x W^T + b: a problem whose weights are parameters, for side-by-side runs of what a
    timed call's parameter refresh, its proof and the check's reference on those parameters
    cost (bench/eval_stages.lua bench/kb_linear/problem.py bench/kb_linear)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)


batch_size = 64
in_features = 2048
out_features = 2048


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
