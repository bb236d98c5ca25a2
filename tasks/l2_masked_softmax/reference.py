# l2_masked_softmax: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """softmax(x[i, :len[i]] / 8) in the first len[i] columns of row i, 0 after them."""

    def __init__(self):
        super().__init__()

    def forward(self, x, len):
        keep = torch.arange(x.shape[1], device=x.device) < len.unsqueeze(1)
        return torch.softmax((x / 8).masked_fill(~keep, float("-inf")), dim=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
b = 16384
n = 4096


def get_inputs():
    x = torch.rand(b, n) * 32 - 16  # uniform(-16, 16)
    len = torch.randint(1, n + 1, (b,), dtype=torch.int32)  # integers in [1, n]
    return [x, len]


def get_init_inputs():
    return []
