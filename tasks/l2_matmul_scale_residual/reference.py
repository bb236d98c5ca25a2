# l2_matmul_scale_residual: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = r + 0.5 * x @ w^T with w [n, k]."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w, r):
        return torch.addmm(r, x, w.t(), alpha=0.5)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 4096
k = 1024
n = 1024


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(m, k) * 2 - 1  # uniform(-1, 1)
    w = uniform(-1/math.sqrt(k), 1/math.sqrt(k), n, k)
    r = torch.randn(m, n)  # normal(mean 0, std 1)
    return [x, w, r]


def get_init_inputs():
    return []
