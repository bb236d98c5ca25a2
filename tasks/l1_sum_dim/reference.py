# l1_sum_dim: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y[b, c] = sum_r x[b, r, c]."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
B = 32
R = 4096
C = 4096


def get_inputs():
    x = torch.rand(B, R, C) * 2 - 1  # uniform(-1, 1)
    return [x]


def get_init_inputs():
    return []
