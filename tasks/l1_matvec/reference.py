# l1_matvec: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = A x with A [m, n] and x [n]."""

    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return torch.mv(A, x)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 32768
n = 8192


def get_inputs():
    A = torch.rand(m, n) * 2 - 1  # uniform(-1, 1)
    x = torch.rand(n) * 2 - 1  # uniform(-1, 1)
    return [A, x]


def get_init_inputs():
    return []
