# l3_transformer_mlp: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = x + gelu_tanh(LayerNorm(x) @ w1 + b1) @ w2 + b2 (eps = 1e-5; w1 [d, f], w2 [f, d])."""

    def __init__(self):
        super().__init__()

    def forward(self, x, gamma, beta, w1, b1, w2, b2):
        hn = F.layer_norm(x, (x.shape[-1],), gamma, beta, eps=1e-5)
        u = F.gelu(torch.addmm(b1, hn, w1), approximate="tanh")
        return x + torch.addmm(b2, u, w2)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
m = 2048
d = 512
f = 2048


def uniform(lo, hi, *shape):
    return torch.rand(*shape) * (hi - lo) + lo


def get_inputs():
    x = torch.randn(m, d)  # normal(mean 0, std 1)
    gamma = torch.rand(d) * 0.4 + 0.8  # uniform(0.8, 1.2)
    beta = torch.rand(d) * 0.4 - 0.2  # uniform(-0.2, 0.2)
    w1 = uniform(-1.7/math.sqrt(d), 1.7/math.sqrt(d), d, f)
    b1 = torch.rand(f) * 0.4 - 0.2  # uniform(-0.2, 0.2)
    w2 = uniform(-1/math.sqrt(f), 1/math.sqrt(f), f, d)
    b2 = torch.rand(d) * 0.4 - 0.2  # uniform(-0.2, 0.2)
    return [x, gamma, beta, w1, b1, w2, b2]


def get_init_inputs():
    return []
