"""KernelBench-style evaluation of one CUDA kernel, for bench/eval.lua to compare with.

Compiles the kernel through torch.utils.cpp_extension.load_inline (as KernelBench's
harness does), checks it against PyTorch on 5 correctness trials with fresh inputs, then
times 100 trials with an L2 flush before each (a 256 MiB write), with CUDA events.
Prints one JSON line: compile_s, check_s, time_s, total_s, median_ms, correct.

Usage: python3 bench/kernelbench_style.py KERNEL.cu N
The kernel file holds `relu(const float*, float*, long long)` as in tasks/l1_relu.
Exit status: 0, 2 on usage errors, 3 where torch or a CUDA device is missing (why on stderr).
"""
import json
import os
import statistics
import sys
import tempfile
import time

if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help") or not sys.argv[2].isdigit():
    print(__doc__.strip(), file=sys.stdout if sys.argv[1:2] in (["-h"], ["--help"]) else sys.stderr)
    sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
try:
    import torch
except ImportError as e:
    print(f"bench/kernelbench_style.py: no torch: {e}", file=sys.stderr)
    sys.exit(3)
if not torch.cuda.is_available():
    print("bench/kernelbench_style.py: no GPU: torch.cuda.is_available() is False", file=sys.stderr)
    sys.exit(3)
from torch.utils.cpp_extension import load_inline

src_path, n = sys.argv[1], int(sys.argv[2])
kernel = open(src_path).read()
cuda_src = kernel + r"""
#include <torch/extension.h>
torch::Tensor relu_fwd(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long long n = x.numel();
  int block = 256;
  long long grid = (n + block - 1) / block;
  if (grid > 132 * 32) grid = 132 * 32;
  relu<<<grid, block>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
cpp_src = "torch::Tensor relu_fwd(torch::Tensor x);"

t0 = time.time()
build_dir = tempfile.mkdtemp(prefix="kb_style_")
mod = load_inline(name="kb_relu_%d" % os.getpid(), cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_fwd"], build_directory=build_dir, verbose=False,
                  extra_cuda_cflags=["-O3", "-arch=sm_90"])
t1 = time.time()

correct = True
for trial in range(5):
    torch.manual_seed(trial)
    x = torch.rand(n, device="cuda") * 2 - 1
    y = mod.relu_fwd(x)
    torch.cuda.synchronize()
    correct = correct and torch.allclose(y, torch.relu(x), atol=0, rtol=0)
t2 = time.time()

flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
x = torch.rand(n, device="cuda") * 2 - 1
for _ in range(5):
    mod.relu_fwd(x)
times = []
for _ in range(100):
    flush.zero_()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    mod.relu_fwd(x)
    b.record()
    torch.cuda.synchronize()
    times.append(a.elapsed_time(b))
t3 = time.time()
print(json.dumps({"compile_s": t1 - t0, "check_s": t2 - t1, "time_s": t3 - t2, "total_s": t3 - t0,
                  "median_ms": statistics.median(times), "correct": bool(correct)}))
