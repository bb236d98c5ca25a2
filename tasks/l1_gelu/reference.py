# l1_gelu: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = 0.5 * x * (1 + erf(x / sqrt(2))) (exact GELU)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
n = 1 << 28


def get_inputs():
    x = torch.rand(n) * 10 - 5  # uniform(-5, 5)
    return [x]


def get_init_inputs():
    return []
