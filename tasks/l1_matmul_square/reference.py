# l1_matmul_square: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """C = A B with A, B [n, n]."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A @ B


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
n = 2048


def get_inputs():
    A = torch.rand(n, n) * 2 - 1  # uniform(-1, 1)
    B = torch.rand(n, n) * 2 - 1  # uniform(-1, 1)
    return [A, B]


def get_init_inputs():
    return []
