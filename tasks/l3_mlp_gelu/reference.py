# l3_mlp_gelu: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = gelu(x @ w1 + b1) @ w2 + b2 (exact GELU; w1 [d, h], w2 [h, o])."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w1, b1, w2, b2):
        return torch.addmm(b2, F.gelu(torch.addmm(b1, x, w1)), w2)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 1024
d = 1024
h = 4096
o = 1024


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(m, d) * 2 - 1  # uniform(-1, 1)
    w1 = uniform(-3/math.sqrt(d), 3/math.sqrt(d), d, h)
    b1 = torch.rand(h) - 0.5  # uniform(-0.5, 0.5)
    w2 = uniform(-1.7/math.sqrt(h), 1.7/math.sqrt(h), h, o)
    b2 = torch.rand(o) - 0.5  # uniform(-0.5, 0.5)
    return [x, w1, b1, w2, b2]


def get_init_inputs():
    return []
