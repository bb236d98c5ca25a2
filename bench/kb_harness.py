"""KernelBench's side of bench/kb_harness.sh: its own harness, eval_kernel_against_ref, judging
bench/kb_relu/kernel.cu on a KernelBench problem, and the side-by-side table.

Usage: python3 bench/kb_harness.py --check KB_SRC
       python3 bench/kb_harness.py KB_SRC PROBLEM.py BUILD_DIR RESULT.json
       python3 bench/kb_harness.py --table RUNS.tsv

KB_SRC holds KernelBench's kernelbench package (KB_SRC/kernelbench or KB_SRC/src/kernelbench).
--check: imports kernelbench.eval (with the stand-ins below) and checks what torch's load_inline
needs (nvcc, ninja, a C++ compiler): exit 0, 1 when the import fails, 3 when a tool lacks.
A run: eval_kernel_against_ref with scripts/eval_from_generations.py's settings (5 correctness
trials, 100 timed trials, measure_performance, cuda_event timing, fp32, the excessive-speedup
check that times the reference too) on a ModelNew that builds kernel.cu with load_inline; the
result goes to RESULT.json; exit 0 when correct, else 1. --table: the table of a run of
bench/kb_harness.sh from its RUNS.tsv (side, run, wall s, exit status, result file, limit s).

KernelBench imports modules that the evaluation never calls: utils.py (imported by the
package) imports dotenv and calls load_dotenv() at import, imports tqdm (used only by
maybe_multithread and maybe_multiprocess_cuda), OpenAI and litellm's completion (used only by
query_server); eval.py imports requests (never used) and pydantic's BaseModel (the base of
KernelExecResult). Each that does not import here gets a minimal stand-in module in a
temporary folder put first on sys.path and PYTHONPATH; --check names them.
"""
import json
import os
import shutil
import statistics
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
USAGE = __doc__.split("\n\n")[1]

# The stand-ins: only enough for `import kernelbench.eval` and KernelExecResult. Anything
# the evaluation would really call raises, so a stand-in can never change a result silently.
PYDANTIC = '''import copy, inspect

class BaseModel:
    """Keyword fields over the class's annotated defaults (each instance gets its own copy)."""
    def __init__(self, **fields):
        for cls in reversed(type(self).__mro__):
            for name in inspect.get_annotations(cls):
                if name in vars(cls):
                    setattr(self, name, copy.deepcopy(vars(cls)[name]))
        for name, value in fields.items():
            setattr(self, name, value)

    def model_dump(self):
        return dict(vars(self))

    dict = model_dump
'''
STANDINS = {
    "dotenv": "def load_dotenv(*args, **kwargs):\n    return False\n",
    "tqdm": "def tqdm(iterable=None, *args, **kwargs):\n    return iterable\n",
    "openai": "class OpenAI:\n    def __init__(self, *args, **kwargs):\n"
              "        raise RuntimeError('openai is a stand-in here (bench/kb_harness.py)')\n",
    "litellm": "def completion(*args, **kwargs):\n"
               "    raise RuntimeError('litellm is a stand-in here (bench/kb_harness.py)')\n",
    "pydantic": PYDANTIC,
    "requests": "",
}


def install_standins():
    """Imports each module KernelBench needs; writes a stand-in for each that fails. -> names."""
    used, folder = [], None
    for name, text in STANDINS.items():
        try:
            __import__(name)
            continue
        except Exception:
            # a half-imported module must not shadow the stand-in
            for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[m]
        if folder is None:
            folder = tempfile.mkdtemp(prefix="kb_standins_")
            import atexit
            atexit.register(shutil.rmtree, folder, True)
            sys.path.insert(0, folder)
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")]))
        with open(os.path.join(folder, name + ".py"), "w") as f:
            f.write(text)
        used.append(name)
    return used


def import_kernelbench(kb_src):
    """Puts KB_SRC's kernelbench package on sys.path and imports its eval. -> (module, stand-ins)."""
    for d in (kb_src, os.path.join(kb_src, "src")):
        if os.path.isfile(os.path.join(d, "kernelbench", "eval.py")):
            sys.path.insert(0, os.path.abspath(d))
            break
    else:
        sys.exit("bench/kb_harness.py: no kernelbench/eval.py in %s or %s/src" % (kb_src, kb_src))
    used = install_standins()
    import kernelbench.eval as kbeval
    return kbeval, used


def check(kb_src):
    """--check: the import, then what load_inline needs on this host."""
    try:
        kbeval, used = import_kernelbench(kb_src)
    except Exception as e:
        print("bench/kb_harness.py: import kernelbench.eval failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    print("kernelbench.eval imported from %s; stand-ins: %s" % (os.path.dirname(os.path.dirname(kbeval.__file__)),
                                                                 ", ".join(used) or "none"))
    from torch.utils import cpp_extension as ce
    missing = []
    if not ce.CUDA_HOME or not os.path.isfile(os.path.join(ce.CUDA_HOME, "bin", "nvcc")):
        missing.append("nvcc (torch's CUDA_HOME: %s; set CUDA_HOME)" % ce.CUDA_HOME)
    if not ce.is_ninja_available():
        missing.append("ninja (`ninja --version` fails: install the ninja-build package or pip's ninja)")
    cxx = os.environ.get("CXX", "c++")
    if not shutil.which(cxx):
        missing.append("a host C++ compiler (%s; set CXX)" % cxx)
    if missing:
        print("bench/kb_harness.py: KernelBench's load_inline cannot build here: missing " + "; ".join(missing),
              file=sys.stderr)
        return 3
    print("load_inline's tools: nvcc in %s, ninja, %s" % (ce.CUDA_HOME, shutil.which(cxx)))
    return 0


# A KernelBench-format candidate: kernel.cu as it is, and the launch of launch.lua (grid: 8
# blocks per SM, 256 threads, n = numel) in a C++ wrapper, on torch's current stream.
MODEL_NEW = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
KERNEL_CU
torch::Tensor relu_forward(torch::Tensor x) {
  x = x.contiguous();
  auto y = torch::empty_like(x);
  int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  relu<<<sms * 8, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
"""
relu_ext = load_inline(name="kb_harness_relu", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
                       cuda_sources=cuda_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x)
'''


def run(kb_src, problem, build_dir, result_path):
    """One evaluation as KernelBench's scripts/eval_from_generations.py makes it."""
    kbeval, _ = import_kernelbench(kb_src)
    import torch
    with open(os.path.join(HERE, "kb_relu", "kernel.cu")) as f:
        custom = MODEL_NEW.replace("KERNEL_CU", f.read())
    with open(problem) as f:
        ref = f.read()
    out, r = {}, None
    try:
        r = kbeval.eval_kernel_against_ref(ref, custom, seed_num=42, num_correct_trials=5, num_perf_trials=100,
                                           measure_performance=True, timing_method="cuda_event", verbose=False,
                                           build_dir=build_dir, device=torch.device("cuda:0"), backend="cuda",
                                           precision=torch.float32)
        if r is None:  # eval_kernel_against_ref's "lock file error, please retry"
            out["error"] = "no result (a lock-file error in the compile: KernelBench asks to retry)"
        else:
            out = dict(compiled=r.compiled, correctness=r.correctness, runtime_ms=r.runtime,
                       ref_runtime_ms=r.ref_runtime, metadata={k: str(v) for k, v in r.metadata.items()})
    except Exception as e:  # what the harness raised goes into the table, its traceback to stderr
        traceback.print_exc()
        out["error"] = "raised %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0])
    with open(result_path, "w") as f:
        json.dump(out, f, indent=1)
    return 0 if r is not None and r.correctness else 1


def verdict(side, rc, limit, path):
    """A table row's verdict and kernel time from a run's exit status and result file."""
    if rc in (124, 137):
        return "timed out after %s s" % limit, "-"
    try:
        with open(path) as f:
            v = json.load(f)
    except (OSError, ValueError):
        return "no result (exit %d)" % rc, "-"
    if side.startswith("kmrun eval"):
        t = v.get("timing") or {}
        cand, eager = t.get("candidate") or {}, t.get("eager") or t.get("reference") or {}
        if "median" not in cand:
            return v.get("status", "?"), "-"
        em = eager.get("median")
        return v.get("status", "?"), "%.3f ms (eager %s ms), median" % (
            cand["median"], "%.3f" % em if isinstance(em, (int, float)) else "-")
    if "error" in v:
        return v["error"], "-"
    what = "correct" if v["correctness"] else "not correct"
    what += ", compiled" if v["compiled"] else ", not compiled"
    trials = v["metadata"].get("correctness_trials")
    what += " %s" % trials if trials else ""
    if v["runtime_ms"] < 0:
        return what, "-"
    return what, "%.3g ms (ref %.3g ms), mean of 100" % (v["runtime_ms"], v["ref_runtime_ms"])


def table(tsv):
    """--table: the rows of RUNS.tsv, then the ratios KernelBench wall / kmrun wall, for fresh
    kmrun evals (side "kmrun eval") and, where run, evals judged by a kmrun serve (side
    "kmrun eval (served)")."""
    print("| side | run | wall s | verdict | kernel time |")
    print("| --- | --- | --- | --- | --- |")
    km_warm, kb = {}, {}
    with open(tsv) as f:
        for line in f:
            side, name, wall, rc, path, limit = line.rstrip("\n").split("\t")
            what, kt = verdict(side, int(rc), limit, path)
            print("| %s | %s | %.2f | %s | %s |" % (side, name, float(wall), what, kt))
            # the ratios: correct runs only, and KernelBench's runs stopped at their limit as lower bounds
            if side.startswith("kmrun eval") and name.startswith("warm") and rc == "0":
                km_warm.setdefault(side, []).append(float(wall))
            if side == "KernelBench" and rc in ("0", "124", "137"):
                kb[name.split()[0]] = (float(wall), ">= " if rc != "0" else "")
    print()
    print("KernelBench: eval_kernel_against_ref(num_correct_trials=5, num_perf_trials=100, measure_performance=True,"
          " timing_method='cuda_event', fp32; check_for_excessive_speedup times the reference too), as in its"
          " scripts/eval_from_generations.py")
    if not km_warm:
        print("KernelBench wall / kmrun wall: - (no warm kmrun run was correct)")
        return 0
    for side in sorted(km_warm):
        m = statistics.median(km_warm[side])
        ratios = {k: w / m for k, (w, _) in kb.items()}
        print("KernelBench wall / %s wall (median of %d warm runs, %.2f s): %s" % (
            side, len(km_warm[side]), m, ", ".join("%s %s%.1fx" % (k, kb[k][1], x) for k, x in ratios.items()) or "-"))
        print("issue 17's target, %s: warm <= 3 s: %s; >= 50x KernelBench's harness: %s" % (
            side, "yes" if m <= 3 else "no",
            ", ".join("%s %s" % (k, "yes" if x >= 50 else "no") for k, x in ratios.items()) or "-"))
    return 0


def main(argv):
    if len(argv) >= 1 and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) == 2 and argv[0] == "--check":
        return check(argv[1])
    if len(argv) == 2 and argv[0] == "--table":
        return table(argv[1])
    if len(argv) == 4 and not argv[0].startswith("-"):
        return run(*argv)
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
