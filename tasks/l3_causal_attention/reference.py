# l3_causal_attention: the task's PyTorch reference in KernelBench's form (docs/tasks.md). It
# computes what reference.cu computes: forward takes the task's inputs in task.lua's order
# (weights are inputs, not nn.Parameters) and returns the task's output.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """softmax(q k^T / sqrt(d) with j > i masked) v, per batch and head."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# The task's first (timed) shape set; get_inputs() reads these names when it is called.
b = 2
heads = 8
s = 2048
d = 64


def get_inputs():
    q = torch.randn(b, heads, s, d)  # normal(mean 0, std 1)
    k = torch.randn(b, heads, s, d)  # normal(mean 0, std 1)
    v = torch.randn(b, heads, s, d)  # normal(mean 0, std 1)
    return [q, k, v]


def get_init_inputs():
    return []
