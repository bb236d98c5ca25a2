# l2_gemm_bias_gelu: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """gelu_tanh(x @ w^T + b) with w [n, k] (nn.Linear's layout)."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w, b):
        return F.gelu(F.linear(x, w, b), approximate="tanh")


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 2048
k = 1024
n = 2048


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.rand(m, k) * 2 - 1  # uniform(-1, 1)
    w = uniform(-3/math.sqrt(k), 3/math.sqrt(k), n, k)
    b = torch.rand(n) - 0.5  # uniform(-0.5, 0.5)
    return [x, w, b]


def get_init_inputs():
    return []
