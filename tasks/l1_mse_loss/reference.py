# l1_mse_loss: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """loss = mean((pred - target)^2), in a 1-element tensor (the task's output shape [1])."""

    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        return F.mse_loss(pred, target).reshape(1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
n = 1 << 28


def get_inputs():
    pred = torch.randn(n)  # normal(mean 0, std 1)
    target = torch.rand(n) * 2 - 1  # uniform(-1, 1)
    return [pred, target]


def get_init_inputs():
    return []
