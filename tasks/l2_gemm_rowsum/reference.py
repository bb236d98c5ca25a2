# l2_gemm_rowsum: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y[i] = sum_j relu(x @ w + bias)[i, j] with w [k, n]."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w, bias):
        return torch.relu(torch.addmm(bias, x, w)).sum(dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 2048
k = 2048
n = 2048


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(m, k) * 2 - 1  # uniform(-1, 1)
    w = uniform(-1/math.sqrt(k), 1/math.sqrt(k), k, n)
    bias = torch.rand(n) * 0.5 - 0.25  # uniform(-0.25, 0.25)
    return [x, w, bias]


def get_init_inputs():
    return []
