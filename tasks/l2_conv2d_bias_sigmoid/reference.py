# l2_conv2d_bias_sigmoid: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """sigmoid(conv2d(x, weight, bias)): 3x3, stride 1, no padding (valid)."""

    def __init__(self):
        super().__init__()

    def forward(self, x, weight, bias):
        return torch.sigmoid(F.conv2d(x, weight, bias))


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
n = 32
c = 3
h = 256
w = 256
f = 64


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(n, c, h, w) * 2 - 1  # uniform(-1, 1)
    weight = uniform(-1.5/math.sqrt(c), 1.5/math.sqrt(c), f, c, 3, 3)
    bias = torch.rand(f) * 2 - 1  # uniform(-1, 1)
    return [x, weight, bias]


def get_init_inputs():
    return []
