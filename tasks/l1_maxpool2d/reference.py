# l1_maxpool2d: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Max pooling, 3x3 window, stride 2, padding 1 (padding never wins), NCHW."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
N = 32
C = 64
H = 448
W = 448


def get_inputs():
    x = torch.randn(N, C, H, W)  # normal(mean 0, std 1)
    return [x]


def get_init_inputs():
    return []
