# t_scaled_mse's PyTorch reference in KernelBench's form: what reference.cu computes.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target, scale):
        return torch.mean((scale * pred - target) ** 2).reshape(1)


n = 1 << 24


def get_inputs():
    return [torch.rand(n), torch.rand(n), 1 + 3 * torch.rand(1)]


def get_init_inputs():
    return []
