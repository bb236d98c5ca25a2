"""How many KernelBench problems an exact kernel could fail against PyTorch eager: for each
problem file of KB_DIR/KernelBench/level1..3 at fp32, fp16 and bf16, eager's own output
(TF32 off, as kmrun runs it) against a float64 run of the same model on the same inputs (one
seed, kmrun's tolerances: atol = rtol = 1e-4 at fp32, 1e-2 at fp16 and bf16). A problem is
affected where some element of eager's output is further from float64 than the tolerance:
there a kernel that computes exactly is failed by an eager reference (issue 45, item 6; level
2 problem 14 is one at fp32).

Usage: python3 bench/kb_eager_error.py KB_DIR [--device cuda|cpu] [--levels 1,2,3] [--precisions fp32,fp16,bf16]

KB_DIR: a KernelBench checkout (git-ignored kb/ in this tree). Prints one line per problem and
precision (level, problem, precision, worst error / tolerance, elements over, affected) and the
counts per level and precision; exit 0. "affected" problems are judged by kmrun against the
same float64 run where a candidate misses eager (docs/eval.md, "When eager's own error exceeds
the tolerance"); "affected, no float64 run" counts those where that run fails (a model that
keeps a floating tensor as a plain attribute), which an exact kernel can still fail. Exit 2 on bad arguments, 3 when torch (or, with
--device cuda, a GPU) is not there.
"""
import glob
import importlib.util
import os
import sys

USAGE = __doc__.split("\n\n")[1]
TOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}


def parse(argv):
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        sys.exit(0)
    opts = {"device": "cuda", "levels": "1,2,3", "precisions": "fp32,fp16,bf16"}
    pos = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--device", "--levels", "--precisions"):
            if i + 1 >= len(argv):
                usage_error("%s needs a value" % a)
            opts[a[2:]] = argv[i + 1]
            i += 2
        elif a.startswith("-"):
            usage_error("unknown option %s" % a)
        else:
            pos.append(a)
            i += 1
    if len(pos) != 1:
        usage_error("one KB_DIR expected")
    if opts["device"] not in ("cuda", "cpu"):
        usage_error("--device: cuda or cpu")
    for p in opts["precisions"].split(","):
        if p not in TOL:
            usage_error("--precisions: fp32, fp16, bf16")
    return pos[0], opts


def usage_error(why):
    sys.stderr.write("kb_eager_error.py: %s\n%s\n" % (why, USAGE))
    sys.exit(2)


def load_module(path):
    spec = importlib.util.spec_from_file_location("kb_problem_%d" % abs(hash(path)), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cast(torch, x, dtype, device):
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype)
    return x


def run(torch, mod, dtype, device, seed=42):
    """The model built and run under `seed` at `dtype` -> (its outputs (a list), the
    float64 run's): the float64 run is the judge's (kb_bridge forward_exact): the model's
    state at `dtype` and the inputs at `dtype`, each floating tensor cast up, through
    torch.func.functional_call; None where the model does not run so (then the judge's
    second opinion is not there for it)."""
    with torch.no_grad():
        torch.manual_seed(seed)
        init = [cast(torch, x, dtype, device) for x in mod.get_init_inputs()]
        torch.manual_seed(seed)
        model = mod.Model(*init).to(device=device, dtype=dtype)
        torch.manual_seed(seed + 1)
        xs = [cast(torch, x, dtype, device) for x in mod.get_inputs()]
        own = dict(model.state_dict())
        for k, b in model.named_buffers():
            own.setdefault(k, b)
        state, seen = {}, {}
        for k, v in own.items():  # a tied parameter: one tensor under each of its names
            tied = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), v.dtype)
            if tied not in seen:
                seen[tied] = v.double() if v.is_floating_point() else v.clone()
            state[k] = seen[tied]
        args = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs)
        y = model(*xs)
        try:
            y64 = torch.func.functional_call(model, state, args)
        except Exception:
            y64 = None
    listed = lambda v: list(v) if isinstance(v, (tuple, list)) else [v]
    return listed(y), (listed(y64) if y64 is not None else None)


def judge(torch, mod, precision, device):
    """-> (worst error / tolerance, elements over the tolerance, whether the float64 run
    ran) of eager against the judge's float64 run; where it does not run, against the model
    built at float64 (inputs and weights drawn at float64: an upper bound at fp16 and bf16)."""
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    got, want = run(torch, mod, dtype, device)
    exact = want is not None
    if not exact:
        want = run(torch, mod, torch.float64, device)[0]
    tol = TOL[precision]
    worst, over = 0.0, 0
    for g, w in zip(got, want):
        if not (isinstance(g, torch.Tensor) and g.is_floating_point()):
            continue
        g, w = g.double(), w.double()
        bound = tol + tol * w.abs()
        finite = torch.isfinite(w) & torch.isfinite(g)
        ratio = torch.where(finite, (g - w).abs() / bound, torch.zeros_like(w))
        worst = max(worst, float(ratio.max()) if ratio.numel() else 0.0)
        over += int((ratio > 1).sum())
    return worst, over, exact


def main(argv):
    kb_dir, opts = parse(argv)
    try:
        import torch
    except ImportError as e:
        sys.stderr.write("kb_eager_error.py: no torch: %s\n" % e)
        return 3
    if opts["device"] == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("kb_eager_error.py: no GPU: torch.cuda.is_available() is False\n")
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    counts = {}
    for level in opts["levels"].split(","):
        files = sorted(glob.glob(os.path.join(kb_dir, "KernelBench", "level" + level, "*.py")))
        for path in files:
            name = os.path.basename(path)
            for precision in opts["precisions"].split(","):
                key = (level, precision)
                c = counts.setdefault(key, {"problems": 0, "affected": 0, "failed": 0, "no_exact": 0})
                c["problems"] += 1
                try:
                    mod = load_module(path)
                    worst, over, exact = judge(torch, mod, precision, opts["device"])
                except Exception as e:  # a problem that does not run at a precision is counted apart
                    c["failed"] += 1
                    print("level%s\t%s\t%s\tnot run: %s" % (level, name, precision, str(e).splitlines()[0][:120] if str(e) else type(e).__name__))
                    continue
                finally:
                    if opts["device"] == "cuda":
                        torch.cuda.empty_cache()
                affected = worst > 1
                c["affected"] += affected
                c["no_exact"] += affected and not exact
                print("level%s\t%s\t%s\t%.3g\t%d\t%s" % (level, name, precision, worst, over,
                      ("affected" if exact else "affected, no float64 run") if affected else "ok"))
                sys.stdout.flush()
    print("\nlevel\tprecision\tproblems\taffected\taffected, no float64 run\tnot run")
    for (level, precision), c in sorted(counts.items()):
        print("%s\t%s\t%d\t%d\t%d\t%d" % (level, precision, c["problems"], c["affected"], c["no_exact"], c["failed"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
