# l2_gemm_softmax: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """softmax(x @ w, rows) with w [k, n]."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        return torch.softmax(x @ w, dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 2048
k = 1024
n = 2048


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(m, k) * 2 - 1  # uniform(-1, 1)
    w = uniform(-4.5/math.sqrt(k), 4.5/math.sqrt(k), k, n)
    return [x, w]


def get_init_inputs():
    return []
