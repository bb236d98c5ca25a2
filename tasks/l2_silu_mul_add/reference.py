# l2_silu_mul_add: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """out = silu(x) * y + z."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y, z):
        return F.silu(x) * y + z


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
n = 1 << 28


def get_inputs():
    x = torch.rand(n) * 12 - 6  # uniform(-6, 6)
    y = torch.randn(n)  # normal(mean 0, std 1)
    z = torch.randn(n)  # normal(mean 0, std 1)
    return [x, y, z]


def get_init_inputs():
    return []
