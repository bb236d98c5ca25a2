# l3_rnn_cell: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """h_new = tanh(x @ w_ih^T + b_ih + h @ w_hh^T + b_hh) (nn.RNNCell's layout)."""

    def __init__(self):
        super().__init__()

    def forward(self, x, h, w_ih, w_hh, b_ih, b_hh):
        return torch.tanh(F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh))


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
batch = 2048
isz = 1024
hsz = 1024


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(batch, isz) * 2 - 1  # uniform(-1, 1)
    h = torch.rand(batch, hsz) * 2 - 1  # uniform(-1, 1)
    w_ih = uniform(-2/math.sqrt(isz + hsz), 2/math.sqrt(isz + hsz), hsz, isz)
    w_hh = uniform(-2/math.sqrt(isz + hsz), 2/math.sqrt(isz + hsz), hsz, hsz)
    b_ih = torch.rand(hsz) * 0.6 - 0.3  # uniform(-0.3, 0.3)
    b_hh = torch.rand(hsz) * 0.6 - 0.3  # uniform(-0.3, 0.3)
    return [x, h, w_ih, w_hh, b_ih, b_hh]


def get_init_inputs():
    return []
