# l1_argmax_dim: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """idx[r] = argmax_j x[r, j] (the first index on ties), as int64."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.argmax(x, dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
rows = 1 << 16
cols = 4096


def get_inputs():
    x = torch.randn(rows, cols)  # normal(mean 0, std 1)
    return [x]


def get_init_inputs():
    return []
