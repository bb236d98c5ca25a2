# l1_rmsnorm: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y[r, j] = x[r, j] / sqrt(mean_k x[r, k]^2 + 1e-6) * weight[j]."""

    def __init__(self):
        super().__init__()

    def forward(self, x, weight):
        return F.rms_norm(x, (x.shape[-1],), weight, eps=1e-6)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
rows = 32768
cols = 4096


def get_inputs():
    x = torch.randn(rows, cols)  # normal(mean 0, std 1)
    weight = torch.rand(cols) + 0.5  # uniform(0.5, 1.5)
    return [x, weight]


def get_init_inputs():
    return []
