# l2_row_l2norm: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y[i] = sqrt(sum_j x[i, j]^2)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.linalg.vector_norm(x, dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 16384
k = 16384


def get_inputs():
    x = torch.randn(m, k)  # normal(mean 0, std 1)
    return [x]


def get_init_inputs():
    return []
