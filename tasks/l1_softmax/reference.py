# l1_softmax: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y[r, :] = softmax(x[r, :])."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
rows = 1 << 16
cols = 1024


def get_inputs():
    x = torch.rand(rows, cols) * 10 - 5  # uniform(-5, 5)
    return [x]


def get_init_inputs():
    return []
