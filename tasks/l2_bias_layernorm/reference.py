# l2_bias_layernorm: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LayerNorm(x + bias) over the last dimension, eps = 1e-6, scale gamma, shift beta."""

    def __init__(self):
        super().__init__()

    def forward(self, x, bias, gamma, beta):
        return F.layer_norm(x + bias, (x.shape[-1],), gamma, beta, eps=1e-6)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 1 << 16
d = 2048


def get_inputs():
    x = torch.randn(m, d)  # normal(mean 0, std 1)
    bias = torch.rand(d) * 2 - 1  # uniform(-1, 1)
    gamma = torch.rand(d) + 0.5  # uniform(0.5, 1.5)
    beta = torch.rand(d) - 0.5  # uniform(-0.5, 0.5)
    return [x, bias, gamma, beta]


def get_init_inputs():
    return []
