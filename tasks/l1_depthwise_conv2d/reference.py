# l1_depthwise_conv2d: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Depthwise 3x3 cross-correlation, stride 1, zero padding 1, no bias; weight [C, 3, 3]."""

    def __init__(self):
        super().__init__()

    def forward(self, x, weight):
        return F.conv2d(x, weight.unsqueeze(1), padding=1, groups=x.shape[1])


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
N = 32
C = 128
H = 224
W = 224


def get_inputs():
    x = torch.rand(N, C, H, W) * 2 - 1  # uniform(-1, 1)
    weight = torch.rand(C, 3, 3) * 2 - 1  # uniform(-1, 1)
    return [x, weight]


def get_init_inputs():
    return []
