# l1_cross_entropy: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """loss[i] = logsumexp(logits[i, :]) - logits[i, target[i]] (no reduction)."""

    def __init__(self):
        super().__init__()

    def forward(self, logits, target):
        return F.cross_entropy(logits, target.long(), reduction="none")


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
n = 16384
c = 8192


def get_inputs():
    logits = torch.randn(n, c) * 2  # normal(mean 0, std 2)
    target = torch.randint(0, c, (n,), dtype=torch.int32)  # integers in [0, c - 1]
    return [logits, target]


def get_init_inputs():
    return []
