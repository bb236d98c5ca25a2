# l1_mse_loss: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """loss[r] = mean over c of (pred[r, c] - target[r, c])^2: one loss per row (sample)."""

    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        return F.mse_loss(pred, target, reduction="none").mean(dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
rows = 16384
cols = 16384


def get_inputs():
    pred = torch.randn(rows, cols)  # normal(mean 0, std 1)
    target = torch.rand(rows, cols) * 2 - 1  # uniform(-1, 1)
    return [pred, target]


def get_init_inputs():
    return []
