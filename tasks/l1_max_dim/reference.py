# l1_max_dim: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y[r] = max_j x[r, j]."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
rows = 32768
cols = 8192


def get_inputs():
    x = torch.randn(rows, cols)  # normal(mean 0, std 1)
    return [x]


def get_init_inputs():
    return []
