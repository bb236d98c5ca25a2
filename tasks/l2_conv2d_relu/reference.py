# l2_conv2d_relu: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """relu(conv2d(x, weight)): 3x3, stride 1, zero padding 1, no bias."""

    def __init__(self):
        super().__init__()

    def forward(self, x, weight):
        return torch.relu(F.conv2d(x, weight, padding=1))


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
n = 16
c = 16
h = 256
w = 256
f = 32


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(n, c, h, w) * 2 - 1  # uniform(-1, 1)
    weight = uniform(-1/math.sqrt(c), 1/math.sqrt(c), f, c, 3, 3)
    return [x, weight]


def get_init_inputs():
    return []
