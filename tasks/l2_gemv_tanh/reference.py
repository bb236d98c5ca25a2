# l2_gemv_tanh: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = tanh(W x + b)."""

    def __init__(self):
        super().__init__()

    def forward(self, W, x, b):
        return torch.tanh(torch.addmv(b, W, x))


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 16384
k = 16384


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    W = uniform(-3/math.sqrt(k), 3/math.sqrt(k), m, k)
    x = torch.rand(k) * 2 - 1  # uniform(-1, 1)
    b = torch.rand(m) - 0.5  # uniform(-0.5, 0.5)
    return [W, x, b]


def get_init_inputs():
    return []
