# l1_layernorm: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LayerNorm over the last dimension, eps = 1e-5, affine weight and bias."""

    def __init__(self):
        super().__init__()

    def forward(self, x, weight, bias):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=1e-5)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
rows = 1 << 16
cols = 1024


def get_inputs():
    x = torch.randn(rows, cols) * 2 + 1  # normal(mean 1, std 2)
    weight = torch.rand(cols) + 0.5  # uniform(0.5, 1.5)
    bias = torch.rand(cols) - 0.5  # uniform(-0.5, 0.5)
    return [x, weight, bias]


def get_init_inputs():
    return []
