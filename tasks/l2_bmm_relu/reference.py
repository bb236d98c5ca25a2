# l2_bmm_relu: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """c[t] = relu(a[t] @ b[t])."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(torch.bmm(a, b))


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
batch = 16384
m = 64
k = 64
n = 64


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    a = torch.rand(batch, m, k) * 2 - 1  # uniform(-1, 1)
    b = uniform(-1.7/math.sqrt(k), 1.7/math.sqrt(k), batch, k, n)
    return [a, b]


def get_init_inputs():
    return []
