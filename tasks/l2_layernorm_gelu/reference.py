# l2_layernorm_gelu: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """gelu(LayerNorm(x)) over the last dimension, eps = 1e-5, scale gamma, shift beta; exact GELU."""

    def __init__(self):
        super().__init__()

    def forward(self, x, gamma, beta):
        return F.gelu(F.layer_norm(x, (x.shape[-1],), gamma, beta, eps=1e-5))


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 16384
d = 4096


def get_inputs():
    x = torch.rand(m, d) * 5 - 2  # uniform(-2, 3)
    gamma = torch.rand(d) + 0.5  # uniform(0.5, 1.5)
    beta = torch.rand(d) - 0.5  # uniform(-0.5, 0.5)
    return [x, gamma, beta]


def get_init_inputs():
    return []
