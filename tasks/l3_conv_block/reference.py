# l3_conv_block: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = x + conv3x3(relu(conv3x3(x, w1) + b1), w2) + b2 (stride 1, zero padding 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w1, b1, w2, b2):
        t = torch.relu(F.conv2d(x, w1, b1, padding=1))
        return x + F.conv2d(t, w2, b2, padding=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
n = 16
c = 32
h = 128
w = 128


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(n, c, h, w) * 2 - 1  # uniform(-1, 1)
    w1 = uniform(-1/math.sqrt(c), 1/math.sqrt(c), c, c, 3, 3)
    b1 = torch.rand(c) * 0.4 - 0.2  # uniform(-0.2, 0.2)
    w2 = uniform(-1/math.sqrt(c), 1/math.sqrt(c), c, c, 3, 3)
    b2 = torch.rand(c) * 0.4 - 0.2  # uniform(-0.2, 0.2)
    return [x, w1, b1, w2, b2]


def get_init_inputs():
    return []
