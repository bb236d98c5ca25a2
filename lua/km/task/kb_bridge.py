"""kmrun's PyTorch side of KernelBench problem files (see lua/km/task/kernelbench.lua, docs/pytorch.md).

Imported into kmrun's embedded interpreter by km.python (python.import) and called through
python.call: every function takes JSON-able arguments and returns a JSON-able value. An
expected failure (a bad problem file, a buffer of the wrong shape) is returned as
{"error": message, "code": CODE}; only a bug here raises.

Tensors cross between kmrun and torch as DLPack views of raw pointers, never as copies:
kmrun's device buffers on the GPU, host memory (host_alloc) on the CPU. A view does not own
its memory; kmrun frees its buffers itself, after torch has let go of them.

Problems run as KernelBench runs them: Model(*get_init_inputs()) under torch.manual_seed,
model and floating-point tensors cast to the precision, forward under torch.no_grad() in
nn.Module's default (training) mode. Two differences, both on purpose: inputs are made on
the problem's device (torch's default device is set while get_inputs() runs), so the same
seed gives other values than KernelBench's CPU generation; and integer and bool tensors keep
their dtype (KernelBench's eval.py casts every tensor, which turns class indices into floats).
"""
import contextlib
import copy
import ctypes
import importlib.util
import inspect
import logging
import os
import sys
import time
import traceback
import types
import warnings

MAX_SOURCE = 16 << 20  # bytes of a problem file read at most

torch = None
_problems = {}
_hosts = {}
_next_id = [0]


class ProblemError(Exception):
    """An expected failure: returned to Lua as {"error": str(e), "code": e.code}."""

    def __init__(self, message, code="PROBLEM_ERROR"):
        super().__init__(message)
        self.code = code


def _stop_of(e):
    """The stop (a deadline or Ctrl-C: _kmrun.Stop, km_python.c) that e is or was raised while
    handling -- the bridge turns whatever it catches into a ProblemError -- or None."""
    stop = getattr(sys.modules.get("_kmrun"), "Stop", None)
    for _ in range(16):
        if stop is None or e is None or isinstance(e, stop):
            return e if stop else None
        e = e.__context__
    return None


def _stopped(stop, fn):
    """'path: get_inputs() did not return within 30 s': the problem's own function that was
    running when the stop came (its outermost frame in the problem file), from the frames."""
    path = stage = None
    for frame, _ in traceback.walk_tb(stop.__traceback__):
        s = frame.f_locals.get("self")
        if path is None and isinstance(s, Problem):
            path = s.path
        if path is not None and frame.f_code.co_filename == path:
            stage = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
            break
    stage = "its top-level code" if stage == "<module>" else "%s()" % (stage or fn.__name__)
    return ProblemError("%s%s %s" % (path + ": " if path else "", stage, stop), stop.code)


def _api(fn):
    """Marks a function called from Lua: ProblemError becomes {"error", "code"}, and so does a
    stop (code TIMEOUT or INTERRUPTED)."""

    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BaseException as e:
            stop = _stop_of(e)
            if stop is not None:
                e = _stopped(stop, fn)
            elif not isinstance(e, ProblemError):
                raise
            msg = str(e)
            p = _problems.get(args[0]) if args and isinstance(args[0], int) else None
            if p is not None and not msg.startswith(p.path):
                msg = "%s: %s" % (p.path, msg)  # every message about a problem names it
            return {"error": msg, "code": e.code}

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@contextlib.contextmanager
def _named_warnings(path):
    """Python warnings raised while a problem file loads, said naming the file: torch's own
    (a deprecated call, a module built oddly) name only torch's source, and among a hundred
    problem files a warning that does not say which one is no help. Each distinct warning
    once per call, on stderr: "kmrun: PATH: UserWarning: message (raised at file.py:12)".
    The process's warning filters decide what is shown (Python's defaults: no
    DeprecationWarning from a library; PYTHONWARNINGS); catch_warnings invalidates the "once
    per location" registry, so a warning shown for one file is shown again for the next."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    seen = set()
    for w in caught:
        key = (w.category, str(w.message))
        if key in seen:
            continue
        seen.add(key)
        where = "" if w.filename == path else " (raised at %s:%s)" % (w.filename, w.lineno)
        text = str(w.message).strip().replace("\n", " ")
        sys.stderr.write("kmrun: %s: %s: %s%s\n" % (path, w.category.__name__, text, where))
    sys.stderr.flush()


def _new_id():
    _next_id[0] += 1
    return _next_id[0]


# ---- torch, imported on first use ----

class _NoCudaRuntimeNote(logging.Filter):
    """Drops torch.utils.cpp_extension's "No CUDA runtime is found, using CUDA_HOME=..."
    warning. Inductor logs it when it compiles for the CPU on a host that has a CUDA toolkit
    but no GPU driver (kmrun's CPU tests, a lint or a baseline on a build host): expected
    there, and nothing a user can act on. The logger's other messages stay."""

    def filter(self, record):
        return not str(record.msg).startswith("No CUDA runtime is found")


def _torch():
    global torch
    if torch is None:
        try:
            with warnings.catch_warnings():
                # torch warns at import when numpy is absent; nothing here needs numpy.
                warnings.filterwarnings("ignore", message=".*NumPy.*")
                import torch as t
        except BaseException as e:
            raise ProblemError("PyTorch is not importable by %s: %s: %s"
                               % (sys.executable, type(e).__name__, e), "NO_TORCH")
        logging.getLogger("torch.utils.cpp_extension").addFilter(_NoCudaRuntimeNote())
        torch = t
    return torch


_meta_warm = [False]


@_api
def warm_meta():
    """The first op on the meta device imports sympy and torch's meta kernels: 1.0 s on the
    H200 host, after 1.7 s for torch itself (bench/history/), more on a slow CPU.
    Done once, before a problem is first loaded on meta (a spec built, a precompile), under
    the import's long deadline rather than the problem's; never on a GPU worker's way to a
    problem whose spec is cached, which runs nothing on meta."""
    t = _torch()
    if not _meta_warm[0]:
        try:
            t.relu(t.empty(1, device="meta"))
        except Exception:
            pass
        _meta_warm[0] = True
    return True


@_api
def torch_info():
    """What torch is, without initializing CUDA (kmrun's driver process never does)."""
    t = _torch()
    return {"version": t.__version__, "cuda_version": t.version.cuda,
            "python": sys.version.split()[0], "executable": sys.executable}


@_api
def torch_version():
    """torch.__version__ without importing torch (an import may be running on another
    thread): torch/version.py, which torch's own __init__ takes __version__ from, is read."""
    if torch is not None:
        return torch.__version__
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise ProblemError("PyTorch is not importable by %s: no module named 'torch'"
                           % sys.executable, "NO_TORCH")
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    ns = {}
    try:
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), ns)
        return str(ns["__version__"])
    except Exception as e:
        raise ProblemError("%s: no __version__ (%s)" % (path, _first_line(e)), "NO_TORCH")


# ---- dtypes: kmrun's names <-> torch's ----

# kmrun dtype -> (DLPack type code, bits, torch dtype name)
_DL = {"f32": (2, 32, "float32"), "f64": (2, 64, "float64"), "f16": (2, 16, "float16"),
       "bf16": (4, 16, "bfloat16"), "i8": (0, 8, "int8"), "i32": (0, 32, "int32"),
       "i64": (0, 64, "int64"), "u8": (1, 8, "uint8")}
# torch dtype name -> kmrun dtype; bool travels as u8 (one byte, 0 or 1) and is viewed back.
_KM = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
       "int8": "i8", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "u8"}
_PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}  # KernelBench's eval.py, atol = rtol


def _tname(dtype):
    return str(dtype).replace("torch.", "")


def _kmdtype(dtype, what):
    name = _tname(dtype)
    if name not in _KM:
        raise ProblemError("%s has dtype %s, which kmrun buffers cannot hold (they hold %s)"
                           % (what, name, ", ".join(sorted(_KM))), "UNSUPPORTED_DTYPE")
    return _KM[name]


# ---- DLPack views of raw pointers ----

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_live = {}  # address of a DLManagedTensor -> what must outlive it (torch calls the deleter)


def _release_view(addr):
    _live.pop(addr, None)


_deleter = _DELETER(_release_view)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_NAME = b"dltensor"
_KDL_CPU, _KDL_CUDA = 1, 2


def wrap(ptr, shape, dtype, device):
    """A torch tensor over memory kmrun owns: ptr (an integer address), shape (a list),
    dtype (kmrun's name), device (a torch.device). No copy; the tensor does not own the
    memory, so it must not outlive the buffer."""
    t = _torch()
    code, bits, _ = _DL[dtype]
    n = len(shape)
    shp = (ctypes.c_int64 * max(n, 1))(*shape)
    strides = (ctypes.c_int64 * max(n, 1))()
    step = 1
    for i in range(n - 1, -1, -1):
        strides[i] = step
        step *= max(int(shape[i]), 1)
    mt = _DLManagedTensor()
    mt.dl_tensor.data = ptr or None
    if device.type == "cuda":
        mt.dl_tensor.device = _DLDevice(_KDL_CUDA, device.index or 0)
    else:
        mt.dl_tensor.device = _DLDevice(_KDL_CPU, 0)
    mt.dl_tensor.ndim = n
    mt.dl_tensor.dtype = _DLDataType(code, bits, 1)
    mt.dl_tensor.shape = ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64))
    mt.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    mt.dl_tensor.byte_offset = 0
    mt.manager_ctx = None
    mt.deleter = _deleter
    addr = ctypes.addressof(mt)
    _live[addr] = (mt, shp, strides)
    try:
        return t.utils.dlpack.from_dlpack(_capsule_new(addr, _CAPSULE_NAME, None))
    except BaseException:
        _live.pop(addr, None)
        raise


_views = {}  # (ptr, shape, dtype, device) -> the view, so repeated calls skip DLPack


def _view(desc, device, what):
    """The view of a kmrun buffer described as {ptr, dtype, shape} from Lua."""
    key = (desc["ptr"], tuple(desc["shape"]), desc["dtype"], str(device))
    v = _views.get(key)
    if v is None:
        if desc["dtype"] not in _DL:
            raise ProblemError("%s: kmrun dtype %s is unknown" % (what, desc["dtype"]))
        if len(_views) >= 256:
            _views.clear()
        v = _views[key] = wrap(desc["ptr"], desc["shape"], desc["dtype"], device)
    return v


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _buffer_for(bufs, name, want, device, what, rows=False):
    """The view of bufs[name] as a tensor of want's shape and dtype, after checking that the
    buffer holds exactly that many elements of that dtype. rows: a buffer of want's shape but
    for its first dimension is taken at its own shape (the judge's sample of a task's rows,
    km.judge.rows)."""
    desc = bufs.get(name)
    if desc is None:
        raise ProblemError("no buffer for %s %s" % (what, name), "MISSING_BUFFER")
    kd = _kmdtype(want.dtype, "%s %s" % (what, name))
    if desc["dtype"] != kd:
        raise ProblemError("%s %s: the buffer is %s, the problem's tensor is %s (%s)"
                           % (what, name, desc["dtype"], kd, _tname(want.dtype)), "WRONG_BUFFER")
    shape = tuple(int(d) for d in desc["shape"])
    own = rows and len(shape) == len(want.shape) and len(shape) > 0 and shape[1:] == tuple(want.shape[1:])
    if not own and _numel(desc["shape"]) != want.numel():
        raise ProblemError("%s %s: the buffer has shape %s, the problem's tensor has shape %s"
                           % (what, name, list(desc["shape"]), list(want.shape)), "WRONG_BUFFER")
    v = _view(desc, device, "%s %s" % (what, name))
    if not own and tuple(v.shape) != tuple(want.shape):
        v = v.view(tuple(want.shape))
    if want.dtype == torch.bool:
        v = v.view(torch.bool)
    return v


# ---- host memory, for running problems on the CPU (and for tests) ----

@_api
def host_alloc(dtype, shape):
    t = _torch()
    if dtype not in _DL:
        raise ProblemError("unknown kmrun dtype %s" % dtype)
    x = t.zeros(tuple(shape), dtype=getattr(t, _DL[dtype][2]), device="cpu")
    i = _new_id()
    _hosts[i] = x
    return {"id": i, "ptr": x.data_ptr(), "nbytes": x.numel() * x.element_size()}


@_api
def host_free(i):
    _hosts.pop(i, None)
    return True


@_api
def host_read(i, max_n=None):
    x = _hosts[i].reshape(-1)
    if max_n is not None:
        x = x[:max_n]
    if x.is_floating_point():
        return [float(v) for v in x.double().tolist()]
    return x.tolist()


@_api
def host_write(i, values):
    x = _hosts[i].reshape(-1)
    if len(values) != x.numel():
        raise ProblemError("host_write: %d values for %d elements" % (len(values), x.numel()))
    x.copy_(_torch().tensor(values, dtype=x.dtype))
    return True


@_api
def host_fill(i, value):
    """Every element of host buffer i set to value (km.task.lint's constant candidates)."""
    _hosts[i].fill_(value)
    return True


# ---- problems ----

def _is_lua_name(s):
    return (s.isidentifier() and s.isascii() and s not in _LUA_KEYWORDS)


_LUA_KEYWORDS = {"and", "break", "do", "else", "elseif", "end", "false", "for", "function",
                 "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then",
                 "true", "until", "while"}


def _describe(x):
    """An init argument or a non-tensor input as JSON."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else repr(x)
    if isinstance(x, (list, tuple)):
        return [_describe(v) for v in x]
    if torch is not None and isinstance(x, torch.Size):
        return list(x)
    if torch is not None and isinstance(x, torch.Tensor):
        return {"tensor": True, "dtype": _tname(x.dtype), "shape": list(x.shape)}
    return repr(x)


class Problem:
    def __init__(self, path, precision, device, seed, tf32, names=None, overrides=None):
        self.path = path
        self.tf32 = tf32
        self.overrides = overrides  # {name: int}: module-level sizes set after the file ran
        self._heldout = None     # (info, variant) from heldout(); None: not derived yet
        self.current = None      # the variant the last make_inputs() used (None: this one)
        self.names_given = names  # {"inputs": [...], "outputs": [...]}: a task's own names
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.precision = precision
        self.dtype = getattr(torch, _PRECISIONS[precision])
        self.device = torch.device(device)
        self.seed = seed
        self.names = None        # input, output and parameter names, fixed by the first spec
        self.input_meta = None   # the inputs' shapes and dtypes (meta tensors), from spec
        self.output_meta = None  # the outputs' shapes and dtypes (meta tensors), from spec
        self.bound = None        # (input views, output views, stream) from bind()
        self.kept = None         # run_bound(copy="keep")'s outputs, until the next call
        self.scalars = {}        # non-tensor inputs from the last get_inputs(), by position
        self.compiled = None     # torch.compile(model), from compile()
        self.compile_info = None
        self.alias = None        # (signature, model) from _aliased(): the model on given parameters
        _set_tf32(tf32)
        self._load()

    # -- errors that name the file and the problem's own frames --
    def _fail(self, stage, e, code="PROBLEM_ERROR"):
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == self.path]
        where = "".join("\n  line %d, in %s: %s" % (f.lineno, f.name, (f.line or "").strip())
                        for f in frames[-5:])
        msg = str(e).strip()
        return ProblemError("%s: %s raised %s%s%s" % (self.path, stage, type(e).__name__,
                                                      ": " + msg if msg else "", where), code)

    def _device_ctx(self):
        # torch >= 2.0: factory calls without a device= land on the problem's device.
        if hasattr(torch, "set_default_device"):
            return self.device
        return _nullctx()

    def _cast(self, x):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point():
                x = x.to(dtype=self.dtype)
            return x.to(device=self.device)
        return x

    def _load(self):
        try:
            with open(self.path, "rb") as f:
                src = f.read(MAX_SOURCE + 1)
        except OSError as e:
            raise ProblemError("%s: cannot read: %s" % (self.path, e.strerror or e), "ENOENT")
        if len(src) > MAX_SOURCE:
            raise ProblemError("%s: larger than %d bytes" % (self.path, MAX_SOURCE))
        try:
            code = compile(src, self.path, "exec")
        except SyntaxError as e:
            raise ProblemError("%s: syntax error at line %s: %s" % (self.path, e.lineno, e.msg),
                               "SYNTAX_ERROR")
        modname = "kmrun_kb_%d_%s%s" % (_next_id[0] + 1, "".join(c if c.isalnum() else "_" for c in self.name),
                                        "_sized" if self.overrides else "")
        mod = types.ModuleType(modname)
        mod.__file__ = self.path
        sys.modules[modname] = mod  # dataclasses, pickling and typing look modules up here
        self.module = mod
        self._code = code  # what rebuild() builds from: the file as it was read here
        try:
            self._build(code, mod)
        except BaseException:
            sys.modules.pop(modname, None)
            raise

    def rebuild(self):
        """The model built again from the code it was first built from (the file as it was
        read then, whatever it holds now), under the problem's seed: the reference as it was
        loaded (its parameters drawn again from the seed, its buffers, attributes and
        module-level tensors made again), in new storages. What bind(), torch.compile and the
        float64 alias held of the old one goes first; names and shapes stay."""
        self.bound = self.kept = self.compiled = self.alias = None
        self.model = None
        name = self.module.__name__
        mod = types.ModuleType(name)
        mod.__file__ = self.path
        sys.modules[name] = mod
        self.module = mod
        self._build(self._code, mod)

    def _build(self, code, mod):
        # module-level tensors drawn at random come from the seed too: rebuild() makes them again
        self._seed(self.seed, torch.manual_seed)
        try:
            exec(code, mod.__dict__)
        except BaseException as e:
            raise self._fail("importing it", e, "IMPORT_ERROR")
        if self.overrides:  # other sizes (held-out, a shape set): read by get_inputs()/get_init_inputs() when called
            mod.__dict__.update(self.overrides)
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in mod.__dict__]
        if missing:
            raise ProblemError("%s: not a KernelBench problem: no %s (a problem file defines "
                               "class Model(nn.Module), get_inputs() and get_init_inputs())"
                               % (self.path, ", ".join(missing)), "NOT_A_PROBLEM")
        Model = mod.Model
        if not (isinstance(Model, type) and issubclass(Model, torch.nn.Module)):
            raise ProblemError("%s: Model is not a subclass of torch.nn.Module" % self.path,
                               "NOT_A_PROBLEM")
        for fn in ("get_inputs", "get_init_inputs"):
            if not callable(mod.__dict__[fn]):
                raise ProblemError("%s: %s is not a function" % (self.path, fn), "NOT_A_PROBLEM")
        with torch.no_grad(), self._device_ctx():
            self._seed(self.seed, torch.manual_seed)
            try:
                init = mod.get_init_inputs()
            except BaseException as e:
                raise self._fail("get_init_inputs()", e)
            if not isinstance(init, (list, tuple)):
                raise ProblemError("%s: get_init_inputs() returned a %s, not a list"
                                   % (self.path, type(init).__name__), "BAD_INPUTS")
            init = [self._cast(x) for x in init]
            self.init_args = [_describe(x) for x in init]
            self._seed(self.seed, torch.manual_seed)
            try:
                model = Model(*init)
            except BaseException as e:
                raise self._fail("Model(*get_init_inputs())", e)
            try:
                self.model = model.to(device=self.device, dtype=self.dtype)
                self._cast_attrs(self.model)
            except BaseException as e:
                raise self._fail("moving the model to %s %s" % (self.device, self.precision), e)

    def _seed(self, seed, seed_fn=None):
        """seed_fn(seed) (default _seed); on the meta device the CPU generator's alone:
        torch.manual_seed queues seeding for CUDA where it is not started, which runs (copies
        to the GPU) when something starts it — km.task.precompile, that must run nothing there."""
        if self.device.type == "meta":
            torch.default_generator.manual_seed(seed)
        else:
            (seed_fn or _seed)(seed)

    def _cast_attrs(self, model):
        """Floating tensors a module keeps as plain attributes (an RNN's h0, alone or in a
        list or tuple) take the model's precision as its parameters do: Module.to() moves only
        parameters and buffers, and a reference at fp16 whose h0 stayed fp32 does not run."""
        def cast(x):
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != self.dtype:
                return x.to(dtype=self.dtype)
            return x
        _map_attrs(model, cast)

    # -- inputs --
    def _inputs(self, seed):
        """get_inputs() under the seed, made on the problem's device and cast."""
        with torch.no_grad(), self._device_ctx():
            self._seed(seed)
            out = [self._cast(x) for x in self._get_inputs()]
        self.scalars = {k: x for k, x in enumerate(out) if not isinstance(x, torch.Tensor)}
        return out

    def _get_inputs(self):
        """get_inputs() as it returns them (a list of tensors and numbers), uncast."""
        try:
            xs = self.module.get_inputs()
        except BaseException as e:
            raise self._fail("get_inputs()", e, "BAD_INPUTS")
        if not isinstance(xs, (list, tuple)):
            raise ProblemError("%s: get_inputs() returned a %s, not a list"
                               % (self.path, type(xs).__name__), "BAD_INPUTS")
        for i, x in enumerate(xs):
            if not isinstance(x, (torch.Tensor, bool, int, float)) and x is not None:
                raise ProblemError("%s: get_inputs() item %d is a %s; inputs are tensors "
                                   "or numbers" % (self.path, i, type(x).__name__), "BAD_INPUTS")
        return list(xs)

    # -- forward --
    def _forward(self, inputs, model=None):
        with torch.no_grad():
            try:
                y = (self.model if model is None else model)(*inputs)
            except BaseException as e:
                raise self._fail("forward", e, "FORWARD_ERROR")
        outs = list(y) if isinstance(y, (tuple, list)) else [y]
        for i, o in enumerate(outs):
            if not isinstance(o, torch.Tensor):
                which = "forward returned" if not isinstance(y, (tuple, list)) else \
                    "forward's output %d is" % i
                raise ProblemError("%s: %s a %s; outputs must be tensors (or a tuple of tensors)"
                                   % (self.path, which, type(o).__name__), "BAD_OUTPUTS")
        if not outs:
            raise ProblemError("%s: forward returned an empty %s" % (self.path, type(y).__name__),
                               "BAD_OUTPUTS")
        return outs, isinstance(y, (tuple, list))

    # -- names (docs/tasks.md, "KernelBench problem files") --
    def _fix_names(self, inputs, n_out, multi):
        outputs = ["out%d" % i for i in range(n_out)] if multi else ["out"]
        taken = set(outputs)
        try:
            sig = inspect.signature(self.model.forward)
            params = []
            for p in sig.parameters.values():
                if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    break
                params.append(p.name)
        except (TypeError, ValueError):
            params = []
        names = []
        for i in range(len(inputs)):
            n = params[i] if i < len(params) else None
            if n is None or not _is_lua_name(n) or n in taken:
                n = "in%d" % i
            taken.add(n)
            names.append(n)
        pnames = {}
        for key in self._state():
            n = key.replace(".", "_")
            if not _is_lua_name(n) or n in taken:
                n = "p_" + n
            while n in taken:
                n = n + "_"
            taken.add(n)
            pnames[key] = n
        self.names = {"inputs": names, "outputs": outputs, "params": pnames}
        if self.names_given:
            self._take_names(len(inputs), n_out)

    def _take_names(self, n_in, n_out):
        """A task's own input and output names, by position (its reference.py takes the
        task's inputs in task.lua's order and returns its outputs in order)."""
        given = self.names_given
        ins, outs = list(given.get("inputs") or []), list(given.get("outputs") or [])
        if len(ins) != n_in or len(outs) != n_out:
            raise ProblemError("get_inputs() gives %d inputs and forward %d outputs; the task names "
                               "%d inputs (%s) and %d outputs (%s)"
                               % (n_in, n_out, len(ins), ", ".join(ins), len(outs), ", ".join(outs)),
                               "BAD_OUTPUTS")
        taken = set(ins) | set(outs)
        if len(taken) != len(ins) + len(outs) or not all(_is_lua_name(n) for n in taken):
            raise ProblemError("the task's input and output names must be distinct Lua names",
                               "PROBLEM_ERROR")
        for key, n in list(self.names["params"].items()):
            while n in taken:
                n = "p_" + n
            taken.add(n)
            self.names["params"][key] = n
        self.names["inputs"], self.names["outputs"] = ins, outs

    def _state(self):
        """The model's parameters and buffers by state_dict key, non-persistent buffers too."""
        st = dict(self.model.state_dict())
        for k, b in self.model.named_buffers():
            st.setdefault(k, b)
        return {k: v for k, v in st.items() if isinstance(v, torch.Tensor)}

    # -- the truth: what the reference holds between calls (docs/eval.md, "Threat model") --
    def _truth(self):
        """Every tensor the reference keeps between calls, as {name: tensor}: the model's
        state (parameters, buffers, non-persistent ones too), tensors kept as plain
        attributes of any submodule (an LSTM's h0) or in a list/tuple attribute, and tensors
        at the problem module's top level. A kernel that alters any of them changes what the
        reference computes, so each is sealed and checked (km.judge)."""
        out = {}
        for k, v in self._state().items():
            out["state:" + k] = v
        for mname, m in self.model.named_modules():
            for a, v in vars(m).items():
                if a.startswith("_"):
                    continue  # _parameters, _buffers: the state above
                prefix = "attr:%s%s" % (mname + "." if mname else "", a)
                if isinstance(v, torch.Tensor):
                    out.setdefault(prefix, v)
                elif isinstance(v, (list, tuple)):
                    for j, x in enumerate(v):
                        if isinstance(x, torch.Tensor):
                            out.setdefault("%s[%d]" % (prefix, j), x)
        for a, v in vars(self.module).items():
            if isinstance(v, torch.Tensor):
                out["global:" + a] = v
        variant = self._heldout[1] if self._heldout else None
        if variant is not None:  # the model at the held-out sizes is the reference there
            for k, v in variant._truth().items():
                out["heldout:" + k] = v
        return out

    def _truth_storages(self):
        """(name, storage) of the truth's tensors, each storage once (views share one)."""
        seen, res = set(), []
        for name, t in sorted(self._truth().items()):
            st = t.untyped_storage()
            key = (st.data_ptr(), st.nbytes(), st.device)
            if key in seen or st.nbytes() == 0:
                continue
            seen.add(key)
            res.append((name, st))
        return res

    def _tensor_desc(self, name, x, what):
        return {"name": name, "dtype": _kmdtype(x.dtype, "%s %s" % (what, name)),
                "torch_dtype": _tname(x.dtype), "shape": list(x.shape)}

    def spec(self, seed):
        inputs = self._inputs(seed)
        outs, multi = self._forward(inputs)
        if self.names is None:
            self._fix_names(inputs, len(outs), multi)
        elif len(outs) != len(self.names["outputs"]) or len(inputs) != len(self.names["inputs"]):
            raise ProblemError("%s: the number of inputs or outputs changed with the seed"
                               % self.path, "BAD_OUTPUTS")
        # what forward() checks input buffers against: shapes and dtypes, no memory
        self.input_meta = [torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
                           if isinstance(x, torch.Tensor) else None for x in inputs]
        ins = []
        for name, x in zip(self.names["inputs"], inputs):
            if isinstance(x, torch.Tensor):
                ins.append(self._tensor_desc(name, x, "input"))
            else:
                ins.append({"name": name, "scalar": _describe(x)})
        params = []
        state = self._state()
        try:
            pkeys = {k for k, _ in self.model.named_parameters(remove_duplicate=False)}
        except TypeError:  # torch < 2.0
            pkeys = {k for k, _ in self.model.named_parameters()}
        for key, name in self.names["params"].items():
            d = self._tensor_desc(name, state[key], "parameter")
            d["key"] = key
            d["kind"] = "parameter" if key in pkeys else "buffer"
            params.append(d)
        outputs = [self._tensor_desc(n, o, "output") for n, o in zip(self.names["outputs"], outs)]
        self.output_meta = [torch.empty(tuple(o.shape), dtype=o.dtype, device="meta") for o in outs]
        return {"name": self.name, "path": self.path, "seed": seed, "precision": self.precision,
                "device": str(self.device), "init_args": self.init_args, "inputs": ins,
                "params": params, "outputs": outputs,
                "tolerance": {"atol": _TOLERANCE[self.precision], "rtol": _TOLERANCE[self.precision]}}

    def ensure_names(self):
        if self.names is None:
            self.spec(self.seed)

    # -- a spec made before (km.task.kbtask's, on the meta device), taken as it is --
    def adopt(self, spec, heldout=True):
        """Takes the names and the shapes of the inputs and outputs from spec (the driver's,
        made on the meta device and kept on disk: km.task.kbtask) instead of running
        get_inputs() and forward for them: spec() on a GPU allocates and computes at the
        problem's own sizes, and heldout() at the held-out sizes again (gigabytes at
        KernelBench's largest problems). heldout: the held-out variant is built at spec's
        held-out sizes, by its rule, and takes its spec too. Where the spec does not fit this
        model (its parameters' names, shapes or dtypes, or the number of its inputs), or the
        variant does not build here, nothing is taken, and names and the held-out shape are
        derived on this device as without a spec. -> whether it was taken"""
        if self.names is not None or self.names_given is not None or not isinstance(spec, dict):
            return False
        if spec.get("name", self.name) != self.name or spec.get("precision", self.precision) != self.precision:
            return False
        try:
            ins, outs = list(spec.get("inputs") or []), list(spec.get("outputs") or [])
            params = list(spec.get("params") or [])
            state = self._state()
            if not outs or len(params) != len(state):
                return False
            for d in params:
                x = state.get(d.get("key"))
                if x is None or list(x.shape) != list(d["shape"]) or _tname(x.dtype) != d["torch_dtype"]:
                    return False
            names = {"inputs": [d["name"] for d in ins], "outputs": [d["name"] for d in outs],
                     "params": {d["key"]: d["name"] for d in params}}
            in_meta = [None if "scalar" in d else
                       torch.empty(tuple(d["shape"]), dtype=getattr(torch, d["torch_dtype"]), device="meta")
                       for d in ins]
            out_meta = [torch.empty(tuple(d["shape"]), dtype=getattr(torch, d["torch_dtype"]), device="meta")
                        for d in outs]
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError):
            return False
        held = None
        if heldout and not self.overrides:
            held = self._adopt_heldout(spec.get("heldout"))
            if held is None:
                return False
        self.names, self.input_meta, self.output_meta = names, in_meta, out_meta
        if held is not None:
            self._heldout = held
        return True

    def _adopt_heldout(self, info):
        """(info, variant) from a spec's held-out part, the variant built at its sizes and
        given its spec; None where it does not build or take it."""
        if not isinstance(info, dict):
            return None
        if "spec" not in info:
            return (info, None) if "why" in info else None
        try:
            over = {k: int(v[1]) for k, v in info["sizes"].items()}
            v = Problem(self.path, self.precision, str(self.device), self.seed, self.tf32,
                        None, overrides=over)
        except (ProblemError, KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None
        if not v.adopt(info["spec"], heldout=False):
            v.close()
            return None
        return info, v

    def close(self):
        """Drops this problem's module (and its held-out variant's)."""
        self.bound = self.compiled = self.alias = None
        sys.modules.pop(self.module.__name__, None)
        variant = self._heldout[1] if self._heldout else None
        if variant is not None:
            variant.close()
        self._heldout = None

    # -- the held-out shape (docs/tasks.md, "The held-out shape") --
    def heldout(self):
        """(info, variant): the problem at its held-out sizes. info is {"rule", "sizes":
        {name: [own, held-out]}, "spec"} or {"why": ...}; variant is that Problem on this
        problem's device (None when there is none). Derived once, by HELDOUT_RULES."""
        if self._heldout is None:
            self._heldout = self._derive_heldout()
        return self._heldout

    def _derive_heldout(self):
        if self.names_given is not None or self.overrides:
            return {"why": "not a problem file as it is"}, None
        sizes = _size_names(self.module)
        if not sizes:
            return {"why": "get_inputs() and get_init_inputs() read no module-level integer of %d or "
                           "more" % HELDOUT_MIN}, None
        base = self.spec(self.seed)
        tried = []
        for rule, over in _heldout_tries(sizes):
            try:
                v = Problem(self.path, self.precision, str(self.device), self.seed, self.tf32,
                            None, overrides=over)
            except ProblemError as e:
                tried.append("%s: %s" % (rule, _short(e)))
                continue
            try:
                vs = v.spec(self.seed)
                why = _same_problem(base, vs)
            except ProblemError as e:
                why = _short(e)
            if why is None:
                info = {"rule": rule, "sizes": {k: [sizes[k], over[k]] for k in over},
                        "spec": {k: vs[k] for k in ("inputs", "params", "outputs")}}
                return info, v
            v.close()
            tried.append("%s: %s" % (rule, why))
        return {"why": "no held-out sizes work: " + "; ".join(tried)}, None


# The held-out rule. Module-level integers of HELDOUT_MIN or more that get_inputs() or
# get_init_inputs() read (batch sizes, dimensions, channels, lengths) are the problem's sizes;
# smaller ones (kernel sizes, strides, padding, groups, layer and head counts) define the
# operator and are kept. The first of these tries that builds, runs, keeps the problem's
# names, dtypes and number inputs, changes some tensor's shape and needs no more memory than
# the problem's own sizes is the held-out shape:
#   odd    every size n -> (3n // 4) | 1         (16 -> 13, 128 -> 97, 4096 -> 3073)
#   mult8  every size n -> 3n // 4 rounded down to a multiple of min(8, n's largest power of
#          two) (sizes that must divide one another: 4096 -> 3072, 128 -> 96)
#   first  the first size read (usually the batch) -> (3n // 4) | 1, the rest kept
HELDOUT_MIN = 16


def _odd(n):
    return (3 * n // 4) | 1


def _mult8(n):
    g = min(n & -n, 8)
    m = (3 * n // 4) // g * g
    return m if m >= g else n


def _heldout_tries(sizes):
    names = list(sizes)
    tries = [("odd", {k: _odd(sizes[k]) for k in names}),
             ("mult8", {k: _mult8(sizes[k]) for k in names}),
             ("first", {names[0]: _odd(sizes[names[0]])})]
    out, seen = [], set()
    for rule, over in tries:
        over = {k: v for k, v in over.items() if v != sizes[k]}
        key = tuple(sorted(over.items()))
        if over and key not in seen:
            seen.add(key)
            out.append((rule, over))
    return out


def _code_names(code, out):
    out.extend(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_names(c, out)


def _size_names(mod):
    """{name: value} of the module-level sizes get_inputs()/get_init_inputs() read, in the
    order they are first read."""
    sizes = {}
    for fn in ("get_inputs", "get_init_inputs"):
        code = getattr(mod.__dict__.get(fn), "__code__", None)
        found = []
        if code is not None:
            _code_names(code, found)
        for n in found:
            v = mod.__dict__.get(n)
            if type(v) is int and v >= HELDOUT_MIN and n not in sizes:
                sizes[n] = v
    return sizes


def _spec_bytes(spec):
    total = 0
    for group in ("inputs", "params", "outputs"):
        for d in spec[group]:
            if "shape" in d:
                size = torch.empty((), dtype=getattr(torch, d["torch_dtype"])).element_size()
                total += _numel(d["shape"]) * size
    return total


def _same_problem(base, held):
    """None when held is base at other sizes (names, dtypes, number inputs kept; some tensor's
    shape changed; no more memory), else why not."""
    changed = False
    for group in ("inputs", "params", "outputs"):
        a, b = base[group], held[group]
        if [d["name"] for d in a] != [d["name"] for d in b]:
            return "its %s are not the problem's (%s)" % (group, ", ".join(d["name"] for d in b))
        for x, y in zip(a, b):
            if ("scalar" in x) != ("scalar" in y) or x.get("dtype") != y.get("dtype"):
                return "%s %s changes kind or dtype" % (group[:-1], x["name"])
            if x.get("shape") != y.get("shape"):
                changed = True
    if not changed:
        return "no tensor's shape changes"
    if _spec_bytes(held) > _spec_bytes(base):
        return "it needs more memory than the problem's own sizes"
    return None


def _short(e, limit=200):
    return str(e).strip().splitlines()[-1][:limit] if str(e).strip() else type(e).__name__


def _matches(p, bufs):
    """Whether bufs' tensors have p's element counts (by name), so p is the variant to use."""
    p.ensure_names()
    for k, name in enumerate(p.names["inputs"]):
        m = p.input_meta[k]
        if m is not None and name in bufs and _numel(bufs[name]["shape"]) != m.numel():
            return False
    for name, m in zip(p.names["outputs"], p.output_meta or []):
        if name in bufs and _numel(bufs[name]["shape"]) != m.numel():
            return False
    if any(n in bufs for n in p.names["params"].values()):
        state = p._state()
        for key, name in p.names["params"].items():
            if name in bufs and _numel(bufs[name]["shape"]) != state[key].numel():
                return False
    return True


def _variant(p, bufs):
    """The problem itself, or its held-out variant where bufs have the held-out shapes (the
    judge verifies every shape set; a problem file's second is the held-out one)."""
    cur = p.current or p
    if _matches(cur, bufs):
        return cur
    if cur is not p and _matches(p, bufs):
        return p
    if p.names_given is None and not p.overrides:
        v = p.heldout()[1]
        if v is not None and _matches(v, bufs):
            return v
    return p


def _seed(seed):
    """torch.manual_seed(seed) where it matters here: the CPU generator and, once CUDA is up,
    each CUDA device's (what get_inputs() draws from; where CUDA is there but not started,
    torch.manual_seed itself, which queues the CUDA seeding). torch.manual_seed also seeds
    MPS, XPU, MTIA and custom devices, at about 100 us a call: most of a timed call's input
    refresh for a small problem."""
    if torch.cuda.is_initialized():  # torch.cuda.manual_seed_all's work, done now
        for g in torch.cuda.default_generators:
            g.manual_seed(seed)
    elif torch.cuda.is_available():
        torch.manual_seed(seed)
        return
    torch.default_generator.manual_seed(seed)


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _set_tf32(allow):
    """fp32 references are computed in full fp32 unless asked: cuDNN convolutions default to
    TF32 in torch, which misses fp32's 1e-4 tolerance. The setting is the process's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # torch >= 2.9
            torch.backends.cuda.matmul.fp32_precision = "tf32" if allow else "ieee"
            torch.backends.cudnn.conv.fp32_precision = "tf32" if allow else "ieee"
        except (AttributeError, RuntimeError, ValueError):
            torch.backends.cuda.matmul.allow_tf32 = bool(allow)
            torch.backends.cudnn.allow_tf32 = bool(allow)


_streams = {}


def _stream_ctx(p, stream):
    """Work on kmrun's stream (an integer CUstream; 0 is the legacy default stream)."""
    if p.device.type != "cuda":
        return _nullctx()
    s = _streams.get((stream, p.device.index))
    if s is None:
        if stream:
            s = torch.cuda.ExternalStream(stream, device=p.device)
        else:
            s = torch.cuda.default_stream(p.device)
        _streams[(stream, p.device.index)] = s
    return torch.cuda.stream(s)


def _problem(i, memory=False):
    p = _problems.get(i)
    if p is None:
        raise ProblemError("no loaded problem %r (released?)" % (i,))
    if memory and p.device.type == "meta":
        raise ProblemError("loaded on the meta device, which gives specs only (no data)")
    return p


# ---- what kernelbench.lua calls ----

@_api
def load(path, precision="fp32", device="cpu", seed=42, tf32=False, names=None, sizes=None, spec=None):
    """sizes: {name: int}, module-level integers set after the file ran (a task's
    reference.py at another of its shape sets: its shape symbols). spec: the problem's spec
    made before (Problem.adopt), which saves running the model for its names and shapes."""
    t = _torch()
    if precision not in _PRECISIONS:
        raise ProblemError("precision %r: expected fp32, fp16 or bf16" % (precision,))
    try:
        dev = t.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ProblemError("device %r: %s" % (device, e))
    if dev.type == "cuda" and not t.cuda.is_available():
        raise ProblemError("%s: device %s asked but torch %s sees no CUDA device"
                           % (path, device, t.__version__), "NO_CUDA")
    if names is not None and not isinstance(names, dict):
        raise ProblemError("names: expected {inputs = {...}, outputs = {...}}")
    if sizes is not None and not (isinstance(sizes, dict) and sizes and all(
            isinstance(k, str) and k.isidentifier() and type(v) is int for k, v in sizes.items())):
        raise ProblemError("sizes: expected {name = integer, ...}, got %r" % (sizes,))
    with _named_warnings(os.path.abspath(path)):
        p = Problem(os.path.abspath(path), precision, device, seed, tf32, names, overrides=sizes or None)
    adopted = spec is not None and p.adopt(spec)
    i = _new_id()
    _problems[i] = p
    return {"id": i, "name": p.name, "path": p.path, "init_args": p.init_args, "adopted": adopted,
            "device": str(p.device), "precision": precision,
            "tolerance": {"atol": _TOLERANCE[precision], "rtol": _TOLERANCE[precision]}}


@_api
def spec(i, seed):
    """The problem's spec; a problem file's (loaded without names) adds "heldout": its
    held-out sizes and spec there ({"rule", "sizes", "spec"}), or {"why"} there are none."""
    p = _problem(i)
    with _named_warnings(p.path):
        s = p.spec(seed)
        if p.names_given is None:
            s["heldout"] = p.heldout()[0]
    return s


@_api
def make_inputs(i, seed, bufs, stream=0, release=True):
    """get_inputs() under the seed, each tensor written into bufs[name] (bufs: name ->
    {ptr, dtype, shape}). Returns the non-tensor inputs by name."""
    base = _problem(i, memory=True)
    p = base.current = _variant(base, bufs)
    with _stream_ctx(p, stream):
        xs = p._inputs(seed)
        if len(xs) != len(p.names["inputs"]):
            raise ProblemError("%s: get_inputs() gave %d inputs, earlier %d"
                               % (p.path, len(xs), len(p.names["inputs"])), "BAD_INPUTS")
        scalars = {}
        for k, name in enumerate(p.names["inputs"]):
            x, xs[k] = xs[k], None  # each generated tensor is freed once it is in kmrun's buffer
            if isinstance(x, torch.Tensor):
                _buffer_for(bufs, name, x, p.device, "input").copy_(x)
            else:
                scalars[name] = _describe(x)
            x = None
    if release and p.device.type == "cuda" and _memory_tight(p.device):
        torch.cuda.empty_cache()  # get_inputs()'s tensors: kmrun's allocations need the room
    return {"scalars": scalars}


def _memory_tight(device):
    """Less than a quarter of the device's memory is free. Only then do get_inputs()'s cached
    blocks go back to the driver after each call: torch.cuda.empty_cache() frees through
    cudaFree, which waits for the whole device, and the next get_inputs() allocates again.
    Their values are inputs the candidate is given anyway; kmrun's own allocations that still
    find no room ask for the cache back (empty_cache() below, from km.judge)."""
    free, total = torch.cuda.mem_get_info(device)
    return free < total // 4


@_api
def empty_cache():
    """torch's cached blocks back to the driver (kmrun could not allocate)."""
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    return True


@_api
def peak_memory(reset=False):
    """The most bytes torch's allocator held in tensors since its last reset (0 where CUDA is
    not initialized); reset: the count starts again from what is allocated now."""
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return 0
    # the allocator's nested statistics as torch's C++ makes them: max_memory_allocated()
    # flattens and sorts every one of them in Python first (about 0.4 ms an evaluation)
    try:
        peak = int(torch.cuda.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["peak"])
    except (KeyError, TypeError, AttributeError):
        peak = int(torch.cuda.max_memory_allocated())
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return peak


@_api
def forward(i, bufs, stream=0, empty_cache=False, params=False, rows=False):
    """The model on the inputs in bufs; each output written into bufs[out name]. Inputs
    that are numbers are the last get_inputs()'s. empty_cache: hand torch's cached blocks
    (which still hold the outputs' values) back to the driver afterwards. params: compute
    with bufs' floating nn.Parameters, not the model's own (_aliased). rows: inputs may have
    another first dimension (_buffer_for)."""
    p = _variant(_problem(i, memory=True), bufs)
    with _stream_ctx(p, stream):
        args = _args(p, bufs, rows)
        outs, _ = p._forward(args, _aliased(p, bufs) if params else None)
        if len(outs) != len(p.names["outputs"]):
            raise ProblemError("%s: forward gave %d outputs, earlier %d"
                               % (p.path, len(outs), len(p.names["outputs"])), "BAD_OUTPUTS")
        for name, o in zip(p.names["outputs"], outs):
            _buffer_for(bufs, name, o, p.device, "output").copy_(o)
        outs = o = None
    if empty_cache and p.device.type == "cuda":
        torch.cuda.empty_cache()
    return True


def _param_tensors(model):
    """{key: nn.Parameter}, a tied parameter under each of its names."""
    try:
        return dict(model.named_parameters(remove_duplicate=False))
    except TypeError:  # torch < 2.0
        return dict(model.named_parameters())


class _Functional:
    """model(*args) computing with `state` ({key: tensor}) in place of its own (a model that
    copy.deepcopy cannot copy: torch.func.functional_call, which swaps them in per call)."""

    def __init__(self, model, state):
        self.model, self.state = model, state

    def __call__(self, *args):
        return torch.func.functional_call(self.model, self.state, args)


def _aliased(p, bufs):
    """p's model computing with bufs' floating nn.Parameters, not its own (the judge's timed
    checks: each timed call's parameters are perturbed, and the reference computes with the
    ones the candidate was handed, proven to be the model's so perturbed). A copy of the
    model whose parameters are views of those buffers and which shares every other tensor
    with the model (buffers, plain attributes: a forward moves the same running statistics);
    kept per problem while the buffers are the same."""
    params = _param_tensors(p.model)
    views, state = {}, {}
    for key, name in p.names["params"].items():
        x = params.get(key)
        if x is not None and x.is_floating_point():
            # a tied parameter: one view under each of its names (functional_call's tie_weights)
            if id(x) not in views:
                views[id(x)] = _buffer_for(bufs, name, x, p.device, "parameter")
            state[key] = views[id(x)]
    if not views:
        return p.model
    sig = tuple(sorted((k, v.data_ptr(), tuple(v.shape)) for k, v in state.items()))
    if p.alias is not None and p.alias[0] == sig:
        return p.alias[1]
    memo = {}
    for m in p.model.modules():
        for x in list(m._parameters.values()) + list(m._buffers.values()) + list(vars(m).values()):
            for y in (x if isinstance(x, (list, tuple)) else (x,)):
                if isinstance(y, torch.Tensor):
                    memo.setdefault(id(y), y)
    memo.update(views)
    try:
        model = copy.deepcopy(p.model, memo)
    except Exception:
        model = _Functional(p.model, state)
    p.alias = (sig, model)
    return model


@_api
def forward_exact(i, bufs, stream=0):
    """The model in float64 on bufs' inputs and on the state in bufs' param buffers (what the
    candidate was handed: parameters and buffers, each floating one cast up; torch.func's
    functional_call swaps them in for this call, so nothing of the model moves), its outputs
    cast to their buffers' dtypes into bufs[out name]: the answer eager approximates at the
    problem's precision. km.judge asks for it where a candidate missed eager's outputs, whose
    own error can exceed the tolerance (docs/eval.md, "When eager's own error exceeds the
    tolerance"). A model that does not run so (a floating tensor it keeps as a plain
    attribute meets float64 ones) raises FORWARD_ERROR: the eager verdict stands."""
    p = _variant(_problem(i, memory=True), bufs)
    state, own, seen = {}, p._state(), {}
    with _stream_ctx(p, stream), torch.no_grad():
        for key, name in p.names["params"].items():
            x = own[key]
            tied = (x.untyped_storage().data_ptr(), x.storage_offset(), tuple(x.shape), x.dtype)
            if tied not in seen:  # a tied parameter: one tensor under each of its names
                v = _buffer_for(bufs, name, x, p.device, "parameter")
                seen[tied] = v.double() if v.is_floating_point() else v.clone()
            state[key] = seen[tied]
        args = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in _args(p, bufs)]
        try:
            y = torch.func.functional_call(p.model, state, tuple(args))
        except BaseException as e:
            raise p._fail("forward in float64", e, "FORWARD_ERROR")
        outs = list(y) if isinstance(y, (tuple, list)) else [y]
        if len(outs) != len(p.names["outputs"]):
            raise ProblemError("%s: forward gave %d outputs, earlier %d"
                               % (p.path, len(outs), len(p.names["outputs"])), "BAD_OUTPUTS")
        for k, (name, o) in enumerate(zip(p.names["outputs"], outs)):
            want = p.output_meta[k] if p.output_meta else o.to(dtype=p.dtype)
            _buffer_for(bufs, name, want, p.device, "output").copy_(o)
        state = seen = args = y = outs = o = None
    return True


def _args(p, bufs, rows=False):
    """The model's arguments: views of bufs' inputs, and the last get_inputs()'s numbers."""
    args = []
    for k, name in enumerate(p.names["inputs"]):
        if k in p.scalars:
            args.append(p.scalars[k])
        else:
            args.append(_buffer_for(bufs, name, p.input_meta[k], p.device, "input", rows))
    return args


@_api
def bind(i, bufs, stream=0, variant="eager", params=False):
    """Checks and wraps io once for run_bound(): the inputs' and outputs' views and the
    stream are kept, so each later call is the model and nothing else (for timing).
    variant: "eager" (the model) or "compile" (what compile() made of it). params (eager):
    as forward's."""
    base = _problem(i, memory=True)
    p = _variant(base, bufs)
    if variant == "compile":
        if p.compiled is None:
            raise ProblemError("bind(variant='compile') before compile()")
        model = p.compiled
    elif variant == "eager":
        model = _aliased(p, bufs) if params else p.model
    else:
        raise ProblemError("variant %r: expected eager or compile" % (variant,))
    args = _args(p, bufs)
    # the outputs' shapes and dtypes as the spec found them (no forward needed to learn them)
    outs = p.output_meta
    if outs is None or len(outs) != len(p.names["outputs"]):
        with _stream_ctx(p, stream):
            outs, _ = p._forward(args, model)
    views = [_buffer_for(bufs, name, o, p.device, "output")
             for name, o in zip(p.names["outputs"], outs)]
    base.bound = (model, args, views, stream)
    base.kept = None
    return True


def _first_line(e, limit=300):
    text = ("%s: %s" % (type(e).__name__, str(e).strip())).splitlines()[0]
    return text[:limit]


@_api
def compile_model(i, bufs, mode="max-autotune-no-cudagraphs", stream=0, fallback="default"):
    """torch.compile(model, mode=mode), compiled now by running it twice on bufs' inputs
    (inductor compiles on the first call); where that fails, mode `fallback` is tried.
    Returns {"mode": used, "asked": mode, "seconds": compile time, "failed": [why, ...]};
    every mode failing is a ProblemError (COMPILE_FAILED) listing why each failed."""
    base = _problem(i, memory=True)
    p = _variant(base, bufs)
    modes = [mode] + ([fallback] if fallback and fallback != mode else [])
    failed, mismatch = [], False
    args = _args(p, bufs)
    tol = 10 * _TOLERANCE[p.precision]
    for m in modes:
        t0 = time.perf_counter()
        h0, m0 = _cache_counts()
        diff, checked = None, False
        try:
            cm = torch.compile(p.model, mode=None if m == "default" else m)
            with _stream_ctx(p, stream):
                p._forward(args, cm)
                got, _ = p._forward(args, cm)
                # what it computes is the model's: its outputs against eager's on the same
                # inputs (a compiled graph from a cache — km.task.precompile's, inductor's own —
                # that computed something else would time the wrong work)
                _seed(p.seed)
                want, _ = p._forward(args)
                _seed(p.seed + 1)
                again, _ = p._forward(args)
                # a model that draws random numbers (dropout in training mode) gives other
                # outputs each run, compiled or not: not checked
                checked = _mismatch(want, again, tol) is None
                if checked:
                    diff = _mismatch(got, want, tol)
                got = want = again = None
                if p.device.type == "cuda":
                    torch.cuda.synchronize(p.device)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            failed.append("%s: %s" % (m, _first_line(e)))
            _dynamo_reset()
            continue
        if diff is not None:
            mismatch = True
            failed.append("%s: its outputs differ from eager's (%s)" % (m, diff))
            _dynamo_reset()
            continue
        p.compiled = base.compiled = cm
        h1, m1 = _cache_counts()
        p.compile_info = base.compile_info = {"mode": m, "asked": mode,
                                              "seconds": time.perf_counter() - t0, "failed": failed,
                                              "fx_hits": h1 - h0, "fx_misses": m1 - m0,
                                              "checked": checked}
        return p.compile_info
    # a mismatch is not kept as unavailable (km.judge keeps COMPILE_FAILED): measured again
    raise ProblemError("torch.compile failed in every mode tried: " + "; ".join(failed),
                       "COMPILE_MISMATCH" if mismatch else "COMPILE_FAILED")


def _dynamo_reset():
    """torch._dynamo.reset(), where it can: a compile left behind does not stay cached."""
    try:
        torch._dynamo.reset()
    except Exception:
        pass


def _mismatch(got, want, tol):
    """None where the outputs agree within tol (atol = rtol); else what differs."""
    if len(got) != len(want):
        return "%d outputs, eager %d" % (len(got), len(want))
    for k, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape):
            return "output %d has shape %s, eager %s" % (k, list(g.shape), list(w.shape))
        if g.is_floating_point() or w.is_floating_point():
            gf, wf = g.detach().float(), w.detach().float()
            if not torch.allclose(gf, wf, rtol=tol, atol=tol, equal_nan=True):
                d = (gf - wf).abs().nan_to_num(float("inf")).max().item()
                return "output %d: max abs difference %.3g, tolerance %.3g" % (k, d, tol)
        elif not torch.equal(g, w):
            return "output %d differs" % k
    return None


# torch.compile modes whose compiling runs nothing on the GPU (the max-autotune modes
# benchmark their choices there while they compile): what precompile() takes.
PRECOMPILE_MODES = ("default", "reduce-overhead")


class _Precompiled(Exception):
    """Raised by precompile()'s inductor once the graph is compiled and kept in its caches:
    the compiled graph is never run."""


class _NoGPUWork(Exception):
    """Raised where inductor would run work on the GPU while precompile() compiles (it
    benchmarks a padded matmul against the plain one, for instance)."""


class _patched:
    """Sets attributes for the length of a with block (those the module lacks are left)."""

    def __init__(self, *triples):
        self.triples = [(o, n, v) for o, n, v in triples if o is not None and hasattr(o, n)]
        self.saved = []

    def __enter__(self):
        for o, n, v in self.triples:
            self.saved.append((o, n, getattr(o, n)))
            setattr(o, n, v)
        return self

    def __exit__(self, *a):
        for o, n, v in reversed(self.saved):
            setattr(o, n, v)
        self.saved = []
        return False


def _module(name):
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _cache_counts():
    """inductor's FX graph cache hits and misses so far in this process."""
    try:
        from torch._dynamo.utils import counters
        return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
    except Exception:
        return 0, 0


_TENSOR_FROM_VALUES = ("tensor", "as_tensor", "scalar_tensor", "from_numpy")


def _tensors_from_values(path):
    """The first call inside a function named forward, in the file at path, that makes a
    tensor from Python values (torch.tensor(0.0, device=x.device)), as "line N: torch.tensor";
    None where there is none (or the file does not parse)."""
    import ast
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == "forward":
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr in _TENSOR_FROM_VALUES:
                    return "line %d: .%s" % (node.lineno, node.func.attr)
    return None


def _cuda_constants(gm):
    """Whether graph gm computes a tensor on the GPU from constants alone (a constructor, a
    module constant, and what follows from them): what inductor's constant folding runs."""
    const = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            const[n] = True
            x = gm
            for a in str(n.target).split("."):
                x = getattr(x, a, None)
            if isinstance(x, torch.Tensor) and x.device.type == "cuda":
                return True
        elif n.op in ("call_function", "call_method", "call_module"):
            const[n] = all(const.get(i, False) for i in n.all_input_nodes)
            v = n.meta.get("val")
            if const[n] and isinstance(v, torch.Tensor) and v.device.type == "cuda":
                return True
        else:
            const[n] = False
    return False


def _empty_attrs(model, device):
    """Plain tensor attributes of a model built on the meta device (an RNN's h0), given
    memory on device as Module.to_empty() gives its parameters and buffers."""
    def empty(x):
        if isinstance(x, torch.Tensor) and x.device.type == "meta":
            return torch.empty(tuple(x.shape), dtype=x.dtype, device=device)
        return x
    _map_attrs(model, empty)


def _map_attrs(model, fn):
    """fn over the tensors every module of model keeps as plain attributes (alone, or in a
    list or tuple); _parameters and _buffers are Module.to()'s and to_empty()'s."""
    for _, m in model.named_modules():
        for a, v in list(vars(m).items()):
            if a.startswith("_"):
                continue
            if isinstance(v, torch.Tensor):
                object.__setattr__(m, a, fn(v))
            elif isinstance(v, list):
                v[:] = [fn(x) for x in v]
            elif type(v) is tuple:
                object.__setattr__(m, a, tuple(fn(x) for x in v))


@_api
def precompile(i, mode="default", device="cuda"):
    """Compiles torch.compile(model, mode) for the problem's inputs into inductor's caches
    (its FX graph cache, Triton's kernel cache) without running anything on the device:
    the problem is loaded on the meta device; its parameters and inputs get memory on
    `device` (torch.empty: no values, no kernel); dynamo traces forward as compile_model()
    calls it; inductor compiles; the compiled graph is never run. A later compile_model()
    of the same problem, in any process, finds the compiled graph in the cache. Where
    inductor would run work on the GPU while compiling, nothing is kept and this fails
    (code GPU_WORK). Returns {"seconds", "fx_hits", "fx_misses"}."""
    p = _problem(i)
    if p.device.type != "meta":
        raise ProblemError("precompile: the problem must be loaded on the meta device")
    if mode not in PRECOMPILE_MODES:
        raise ProblemError("precompile: mode %r runs work on the GPU while it compiles (modes: %s)"
                           % (mode, ", ".join(PRECOMPILE_MODES)))
    made = _tensors_from_values(p.path)
    if made:
        # dynamo and AOTAutograd make such a tensor for real on the model's device while
        # they trace (a copy to the GPU, then one on it)
        raise ProblemError("precompile: forward makes a tensor from Python values (%s); left to "
                           "the judge" % made, "GPU_WORK")
    t = _torch()
    dev = t.device(device)
    p.ensure_names()  # names, the inputs' shapes and numbers: get_inputs() on meta
    t0 = time.perf_counter()
    h0, m0 = _cache_counts()
    model = p.model.to_empty(device=dev)
    _empty_attrs(model, dev)
    args = []
    for k, _ in enumerate(p.names["inputs"]):
        if k in p.scalars:
            args.append(p.scalars[k])
        else:
            meta = p.input_meta[k]
            args.append(t.empty(tuple(meta.shape), dtype=meta.dtype, device=dev))
    _compile_and_stop(t, model, args, mode)
    h1, m1 = _cache_counts()
    return {"seconds": time.perf_counter() - t0, "fx_hits": h1 - h0, "fx_misses": m1 - m0}


@_api
def precompile_warm_up(device="cuda"):
    """The first compile in a process, of a one-line function on an empty tensor: torch's
    one-time set-up for compiling (inductor's pattern tables: CUPTI shows 24 small copies to
    and on the GPU there) done as a precompiler starts, not inside a task's compile. Returns
    {"seconds"}."""
    t = _torch()
    t0 = time.perf_counter()
    m = t.nn.Sequential(t.nn.ReLU())
    x = t.empty((64,), dtype=t.float32, device=t.device(device))
    _compile_and_stop(t, m, [x], "default")
    return {"seconds": time.perf_counter() - t0}


def _compile_and_stop(t, model, args, mode):
    """torch.compile(model, mode) called on args as Problem._forward calls a model, with
    inductor stopped once the graph is compiled into its caches. Raises ProblemError
    GPU_WORK where inductor would run work on the GPU, COMPILE_FAILED where it fails."""
    cfx = importlib.import_module("torch._inductor.compile_fx")
    compile_fx = cfx.compile_fx

    def compile_then_stop(*a, **kw):
        compile_fx(*a, **kw)
        raise _Precompiled()

    def refuse(*a, **kw):
        raise _NoGPUWork()

    bench = _module("torch._inductor.runtime.benchmarking")
    pad = _module("torch._inductor.fx_passes.pad_mm")
    joint = _module("torch._inductor.fx_passes.joint_graph")
    fold = getattr(joint, "constant_fold_uniform_value", None)

    def fold_on_host_only(gm, *a, **kw):
        # inductor folds constants by running them (a fill, then a read back): on the GPU
        # where they live there
        if _cuda_constants(gm):
            raise _NoGPUWork()
        return fold(gm, *a, **kw)

    done = False
    # what runs work on the GPU while inductor compiles, each refused: pad_mm benchmarks a
    # padded matmul against the plain one (its entry points across torch versions), the
    # benchmarker itself, and constant folding on the GPU
    with _patched((cfx, "compile_fx", compile_then_stop),
                  (pad, "get_do_bench", refuse), (pad, "should_pad_bench", refuse),
                  (pad, "_should_pad_bench", refuse), (pad, "_should_pad", refuse),
                  (getattr(bench, "benchmarker", None), "benchmark_gpu", refuse),
                  (joint, "constant_fold_uniform_value", fold_on_host_only)):
        try:
            cm = t.compile(model, mode=None if mode == "default" else mode)
            with t.no_grad():  # as Problem._forward calls the model
                cm(*args)
        except BaseException as e:
            chain, x = [], e
            while x is not None and len(chain) < 20:
                chain.append(x)
                x = getattr(x, "inner_exception", None) or x.__cause__ or x.__context__
            if any(isinstance(x, _Precompiled) for x in chain):
                done = True
            elif any(isinstance(x, _NoGPUWork) for x in chain):
                raise ProblemError("precompile: inductor would run work on the GPU while "
                                   "compiling (a benchmark, or constants folded there); left to "
                                   "the judge", "GPU_WORK")
            elif isinstance(e, KeyboardInterrupt):
                raise
            else:
                raise ProblemError("precompile: " + _first_line(e), "COMPILE_FAILED")
        finally:
            cm = None
            _dynamo_reset()
    if not done:
        raise ProblemError("precompile: the compiled graph would have run", "COMPILE_FAILED")


@_api
def run_bound(i, copy=True):
    """The model on the bound inputs; copy: its outputs into the bound output buffers.
    copy="keep": an output of its buffer's shape and dtype, contiguous, in memory of its own
    (no input's) is kept, until the next run_bound or bind, and its address returned in
    place of the copy; the others are copied. -> True, or (keep) {"kept": {output name:
    address}} (the copied ones left out)."""
    p = _problem(i)
    if getattr(p, "bound", None) is None:
        raise ProblemError("run_bound before bind", "PROBLEM_ERROR")
    model, args, views, stream = p.bound
    p.kept = None  # the last call's outputs go back to torch's cache (stream-ordered)
    with _stream_ctx(p, stream), torch.no_grad():
        try:
            y = model(*args)
        except BaseException as e:
            raise p._fail("forward", e, "FORWARD_ERROR")
        if copy:
            if not isinstance(y, (tuple, list)):
                y = (y,)
            if copy == "keep":
                return _keep_outputs(p, args, views, y)
            for v, o in zip(views, y):
                v.copy_(o)
    return True


@_api
def unbind(i):
    """Drops what bind() and run_bound() hold: the views of the bound buffers and the last
    call's kept outputs go back to torch's cache (stream-ordered), so a problem that is not
    being timed holds no device memory of its outputs."""
    p = _problems.get(i)
    if p is not None:
        p.bound = None
        p.kept = None
    return True


def _keep_outputs(p, args, views, y):
    """run_bound(copy="keep")'s outputs: kept where the judge can compare them in place."""
    inputs = set(a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor))
    kept, where = [], {}
    for name, v, o in zip(p.names["outputs"], views, y):
        if (isinstance(o, torch.Tensor) and o.device == v.device and o.dtype == v.dtype
                and o.shape == v.shape and o.is_contiguous()
                and o.untyped_storage().data_ptr() not in inputs):
            kept.append(o)
            where[name] = o.data_ptr()
        else:
            v.copy_(o)
    p.kept = kept
    return {"kept": where}


@_api
def write_params(i, bufs, stream=0):
    """Copies the model's parameters and buffers into bufs[name] (device to device)."""
    p = _variant(_problem(i, memory=True), bufs)
    state = p._state()
    with _stream_ctx(p, stream), torch.no_grad():
        for key, name in p.names["params"].items():
            _buffer_for(bufs, name, state[key], p.device, "parameter").copy_(state[key])
    return True


# ---- the refresh plan: get_inputs() learned once, replayed by the judge ----
#
# The judge draws fresh inputs before every timed call. Calling get_inputs() for that puts
# Python in the timed loop; where get_inputs() returns only fresh draws of torch's RNG
# factories, their laws are learned here once, and the judge replays them with its own GPU
# fill (uniform [a, b), normal(a, b), integers in [a, b]) and copies the parameters raw.
# The trace is a TorchFunctionMode that sees every torch call get_inputs() makes: a drawn
# tensor that is an argument of any later call (x * 2, x.abs(), x[0] = 1, x.contiguous())
# is no longer known to hold its law, so the plan refuses it. Not seen: aliases made outside
# torch's dispatch (torch.utils.dlpack.to_dlpack, ctypes on an address) — no problem file
# does that.

class _Draw:
    """A tensor a factory call made in get_inputs(): its law (dist, a, b) or why it has none.
    Holding the tensor keeps its id() from being reused during the trace."""

    def __init__(self, tensor, name, law):
        self.tensor = tensor
        self.blank = law is None  # torch.empty/zeros: uniform_() or normal_() may fill it
        self.tainted = None       # the first other call it was an argument of
        self.spent = False        # mapped into another draw (x * 2): that one is the input
        self.set(name, law)

    def set(self, name, law):
        self.name = name
        self.law, self.why = (None, law) if isinstance(law, str) else (law, None)


def _arg(args, kwargs, pos, key, default):
    return args[pos] if len(args) > pos else kwargs.get(key, default)


def _real(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _real_law(dist, a, b):
    if not (_real(a) and _real(b)):
        return "its %s parameters are not numbers" % dist
    return (dist, float(a), float(b))


def _randint_law(args, kwargs, first):
    """randint(high, size), randint(low, high, size), keywords low/high; randint_like's
    after its template (first = 1). -> ("int", low, high - 1): the bounds inclusive."""
    nums = []
    for a in args[first:first + 2]:
        if isinstance(a, (tuple, list)):
            break  # the size
        nums.append(a)
    low, high = (nums if len(nums) == 2 else
                 [kwargs.get("low", 0), nums[0] if nums else kwargs.get("high")])
    if type(low) is not int or type(high) is not int:
        return "its bounds are not integers"
    return ("int", low, high - 1)


_affine_ops = None


def _affine_op(func):
    """The arithmetic with a number that maps a uniform or normal draw to another of its kind:
    "mul", "div", "add", "sub", "rsub" (c - x), with "_" after an in-place one; else None."""
    global _affine_ops
    if _affine_ops is None:
        T = torch.Tensor
        _affine_ops = {T.__mul__: "mul", T.__rmul__: "mul", T.mul: "mul", torch.mul: "mul",
                       T.__truediv__: "div", T.div: "div", torch.div: "div",
                       T.__add__: "add", T.__radd__: "add", T.add: "add", torch.add: "add",
                       T.__sub__: "sub", T.sub: "sub", torch.sub: "sub", T.__rsub__: "rsub",
                       T.mul_: "mul_", T.div_: "div_", T.add_: "add_", T.sub_: "sub_"}
    return _affine_ops.get(func)


def _affine_law(law, op, c):
    """law after x op c (uniform: its interval mapped; normal: mean and std), or None (a zero
    scale: no longer a draw)."""
    k, s = {"mul": (c, 0.0), "div": (1.0 / c if c else 0.0, 0.0), "add": (1.0, c),
            "sub": (1.0, -c), "rsub": (-1.0, c)}[op.rstrip("_")]
    if k == 0:
        return None
    dist, a, b = law
    if dist == "uniform":
        lo, hi = a * k + s, b * k + s
        return ("uniform", min(lo, hi), max(lo, hi))
    return ("normal", a * k + s, b * abs(k))


_calls = None


def _trace_calls():
    """(draws, fills, likes, reads): the calls the trace knows. draws: function -> (name,
    law(args, kwargs)), law None for torch.empty/zeros (a blank to fill); fills: the in-place
    fills of a blank; likes: factories whose first argument is only a template; reads:
    calls that only read a tensor's shape, dtype or device."""
    global _calls
    if _calls is None:
        T = torch.Tensor
        uniform = lambda a, k: ("uniform", 0.0, 1.0)  # noqa: E731
        normal = lambda a, k: ("normal", 0.0, 1.0)    # noqa: E731
        draws = {
            torch.rand: ("torch.rand", uniform), torch.rand_like: ("torch.rand_like", uniform),
            torch.randn: ("torch.randn", normal), torch.randn_like: ("torch.randn_like", normal),
            torch.randint: ("torch.randint", lambda a, k: _randint_law(a, k, 0)),
            torch.randint_like: ("torch.randint_like", lambda a, k: _randint_law(a, k, 1)),
            torch.normal: ("torch.normal", lambda a, k: _real_law(
                "normal", _arg(a, k, 0, "mean", None), _arg(a, k, 1, "std", None))),
            T.uniform_: ("Tensor.uniform_", lambda a, k: _real_law(
                "uniform", _arg(a, k, 1, "from", 0), _arg(a, k, 2, "to", 1))),
            T.normal_: ("Tensor.normal_", lambda a, k: _real_law(
                "normal", _arg(a, k, 1, "mean", 0), _arg(a, k, 2, "std", 1))),
            torch.empty: ("torch.empty", lambda a, k: None),
            torch.zeros: ("torch.zeros", lambda a, k: None)}
        fills = {T.uniform_, T.normal_}
        likes = {torch.rand_like, torch.randn_like, torch.randint_like}
        reads = {getattr(T, n) for n in ("size", "dim", "numel", "element_size",
                                         "is_floating_point", "__len__")}
        reads |= {getattr(T, n).__get__ for n in ("shape", "dtype", "device", "ndim")}
        _calls = (draws, fills, likes, reads)
    return _calls


def _fits(law, out):
    """law, or why out's dtype does not take it: uniform and normal fill floating tensors,
    int floating or integer ones (not bool)."""
    if law is None or isinstance(law, str):
        return law
    integer = not (out.is_floating_point() or out.is_complex() or out.dtype == torch.bool)
    if not out.is_floating_point() and not (law[0] == "int" and integer):
        return "a %s tensor, which a%s %s law does not fill" % (
            _tname(out.dtype), "n" if law[0] == "int" else "", law[0])
    return law


def _call_name(func):
    owner = getattr(func, "__self__", None)
    if type(owner).__name__ == "getset_descriptor":  # x.T, x.data = y
        return "Tensor.%s%s" % (owner.__name__, " (set)" if func.__name__ == "__set__" else "")
    if hasattr(func, "__objclass__") or getattr(func, "__qualname__", "").startswith("Tensor."):
        return "Tensor." + func.__name__
    return "%s.%s" % (getattr(func, "__module__", None) or "torch", getattr(func, "__name__", func))


class _Recorder:
    """What get_inputs() drew: id(tensor) -> _Draw; why: a reason that refuses every input
    (a generator= call)."""

    def __init__(self):
        self.draws, self.why = {}, None

    def draw_of(self, x):
        d = self.draws.get(id(x)) if isinstance(x, torch.Tensor) else None
        return d if d is not None and d.tensor is x else None

    def _taint(self, v, func):
        if isinstance(v, (list, tuple)):
            for x in v:
                self._taint(x, func)
        elif isinstance(v, dict):
            for x in v.values():
                self._taint(x, func)
        else:
            d = self.draw_of(v)
            if d is not None and d.tainted is None:
                d.tainted = _call_name(func)

    def _affine(self, func, args, kwargs):
        """x * c, x / c, x + c, x - c, c - x (and in place) for a fresh uniform or normal draw x
        and a number c: the result is a draw of the mapped law (torch.rand(n) * 2 - 1 is
        uniform on [-1, 1)); x itself is spent — returning or using it again has a why. ->
        the result, or None when this call is not such a step."""
        op = _affine_op(func)
        if op is None or kwargs or len(args) != 2:
            return None
        d, c = self.draw_of(args[0]), args[1]
        if (d is None or not _real(c) or d.tainted is not None or d.blank or not d.law
                or d.law[0] not in ("uniform", "normal") or not d.tensor.is_floating_point()):
            return None
        law = _affine_law(d.law, op, float(c))
        if law is None:
            return None
        out = func(*args)
        if op.endswith("_"):  # in place: the same tensor, its law mapped
            d.law = law
            return out
        d.tainted, d.spent = _call_name(func), True
        self.draws[id(out)] = _Draw(out, d.name + " mapped", law)
        return out

    def call(self, func, args, kwargs):
        out = self._affine(func, args, kwargs)
        if out is not None:
            return out
        draws, fills, likes, reads = _trace_calls()
        fill = self.draw_of(args[0]) if func in fills and args else None
        if fill is not None and not (fill.blank and fill.tainted is None):
            fill = None  # uniform_() of anything but an untouched blank taints it below
        own = fill is not None or func in likes or func in reads  # args[0] only read or filled
        self._taint(list(args[1:] if own else args), func)
        self._taint(kwargs, func)
        out = func(*args, **kwargs)
        entry = draws.get(func)
        if entry is None or "out" in kwargs or not isinstance(out, torch.Tensor):
            return out
        name, law = entry[0], entry[1](args, kwargs)
        if kwargs.get("generator") is not None and self.why is None:
            self.why = "get_inputs() passes generator= to %s" % name
        if func in fills:
            if fill is not None:
                fill.blank = False
                fill.set(name, _fits(law, out))
        else:
            self.draws[id(out)] = _Draw(out, name, _fits(law, out))
        return out


_mode_class = None


def _tracing(rec):
    """A TorchFunctionMode handing each torch call to rec (the class is made on first use, as
    torch is imported then)."""
    global _mode_class
    if _mode_class is None:
        class _TraceMode(torch.overrides.TorchFunctionMode):
            def __init__(self, rec):
                super().__init__()
                self.rec = rec

            def __torch_function__(self, func, types, args=(), kwargs=None):
                return self.rec.call(func, args, kwargs or {})
        _mode_class = _TraceMode
    return _mode_class(rec)


def _trace_inputs(p):
    """get_inputs() once under a _Recorder -> (its items uncast, the recorder). The trace is
    pushed inside the device context, so it sees each call first and the device context still
    puts the tensors on the problem's device. The draws are made in forked RNG state (the CPU
    generator's and the problem's CUDA device's): the generators are left as they were."""
    rec = _Recorder()
    devs = []
    if p.device.type == "cuda":
        devs = [p.device.index if p.device.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=devs), torch.no_grad(), p._device_ctx(), _tracing(rec):
        xs = p._get_inputs()
    return xs, rec


def _input_why(rec, name, x, seen):
    """Why input name (a tensor get_inputs() returned) cannot be drawn by the judge, or None."""
    d = rec.draw_of(x)
    if d is None:
        return "input %s is not a tensor that a torch RNG call made in get_inputs()" % name
    if id(x) in seen:
        return "input %s is input %s again" % (name, seen[id(x)])
    seen[id(x)] = name
    if d.why or d.law is None:
        return "input %s (%s): %s" % (name, d.name,
                                      d.why or "never filled by uniform_() or normal_()")
    if d.tainted:
        return "input %s: get_inputs() passes it to %s after %s made it" % (name, d.tainted, d.name)
    return None


def _plan_inputs(p, bufs, xs, rec):
    """-> (laws by input name, scalars by name, whys): each tensor's buffer checked as
    make_inputs checks it, against the tensor as _cast makes it (shape and dtype only)."""
    laws, scalars, whys, seen = {}, {}, [], {}
    for name, x in zip(p.names["inputs"], xs):
        if not isinstance(x, torch.Tensor):
            scalars[name] = _describe(x)
            continue
        dtype = p.dtype if x.is_floating_point() else x.dtype
        _buffer_for(bufs, name, torch.empty(tuple(x.shape), dtype=dtype, device="meta"),
                    p.device, "input")
        whys.append(_input_why(rec, name, x, seen))
        d = rec.draw_of(x)
        if d is not None and d.law:
            laws[name] = {"dist": d.law[0], "a": d.law[1], "b": d.law[2]}
    unused = [d.name for d in rec.draws.values() if d.law and not d.spent and id(d.tensor) not in seen]
    if unused:  # a draw behind a number input, or one that made nothing returned
        whys.append("get_inputs() draws a tensor (%s) it does not return as an input" % unused[0])
    return laws, scalars, whys


def _plan_params(p, bufs):
    """-> (each param's {ptr, nbytes}, whys): the live state tensor's memory, which the judge
    copies into the buffer; the buffer checked as write_params checks it."""
    params, whys, state = {}, [], p._state()
    for key, name in p.names["params"].items():
        x = state[key]
        _buffer_for(bufs, name, x, p.device, "parameter")
        if not x.is_contiguous() or x.device != p.device:
            whys.append("parameter %s (%s) is not contiguous on %s" % (name, key, p.device))
        params[name] = {"ptr": x.data_ptr(), "nbytes": x.numel() * x.element_size()}
    return params, whys


@_api
def refresh_plan(i, bufs):
    """How the judge draws fresh inputs without Python. bufs as for make_inputs (name ->
    {ptr, dtype, shape}; the variant is chosen as make_inputs chooses it). Returns {"inputs":
    {name: {"dist": "uniform"|"normal"|"int", "a", "b"}}, "params": {name: {"ptr",
    "nbytes"}}, "scalars": {name: value}}: uniform in [a, b), normal of mean a and std b,
    integers in [a, b]; each param the live state tensor's memory, to copy into its buffer;
    scalars as make_inputs returns them (and as forward then uses them). Or {"why": one
    line}: the judge calls make_inputs (and write_params) for each draw. Buffers are checked
    as make_inputs and write_params check them (MISSING_BUFFER, WRONG_BUFFER). get_inputs()
    runs once, in forked RNG state (not reseeded): torch's generators are left as they were,
    so make_inputs(seed) and every later draw give what they gave without this call."""
    base = _problem(i, memory=True)
    p = base.current = _variant(base, bufs)
    xs, rec = _trace_inputs(p)
    if len(xs) != len(p.names["inputs"]):
        raise ProblemError("%s: get_inputs() gave %d inputs, earlier %d"
                           % (p.path, len(xs), len(p.names["inputs"])), "BAD_INPUTS")
    p.scalars = {k: x for k, x in enumerate(xs) if not isinstance(x, torch.Tensor)}
    laws, scalars, whys = _plan_inputs(p, bufs, xs, rec)
    whys.insert(0, rec.why)
    xs = rec = None  # the drawn tensors go now
    if p.device.type == "cuda" and _memory_tight(p.device):
        torch.cuda.empty_cache()
    params, pwhys = _plan_params(p, bufs)
    why = next((w for w in whys + pwhys if w), None)
    if why is not None:
        return {"why": why}
    return {"inputs": laws, "params": params, "scalars": scalars}


@_api
def truth(i):
    """[name, device pointer, bytes] of each storage the reference keeps on the GPU
    between calls (Problem._truth), for km.judge's keyed digests."""
    p = _problem(i)
    return [[name, st.data_ptr(), st.nbytes()] for name, st in p._truth_storages()
            if st.device.type == "cuda"]


@_api
def snapshot(i):
    """Readies restore(), before any candidate code runs: the held-out variant is built now
    (a problem file's). Nothing is copied: restore() builds the model again from its code and
    seed, only where a candidate altered it, where a host copy at every load takes seconds at
    KernelBench's largest GEMM problems. Returns how many storages and bytes the truth holds."""
    p = _problem(i, memory=True)
    if p.names_given is None:
        p.heldout()  # the model at the held-out sizes is built now, before any candidate code
    p.snap = True
    storages = p._truth_storages()
    return {"storages": len(storages), "bytes": sum(st.nbytes() for _, st in storages)}


@_api
def restore(i):
    """The reference as it was loaded, after a candidate altered its state: the model (and
    its held-out variant) built again from the code and seed it was built from (Problem.rebuild),
    so the next candidate meets the model as it was loaded. Returns how many storages the truth
    holds then."""
    p = _problem(i, memory=True)
    if not getattr(p, "snap", None):
        raise ProblemError("restore before snapshot", "PROBLEM_ERROR")
    with _named_warnings(p.path):
        p.rebuild()
        variant = p._heldout[1] if p._heldout else None
        if variant is not None:
            variant.rebuild()
    if p.device.type == "cuda":
        torch.cuda.synchronize(p.device)
    return len(p._truth_storages())


@_api
def release(i, empty_cache=False):
    p = _problems.pop(i, None)
    if p is not None:
        p.close()
        if empty_cache and p.device.type == "cuda":
            torch.cuda.empty_cache()
    _views.clear()
    return True


@_api
def synchronize(i):
    p = _problem(i)
    if p.device.type == "cuda":
        torch.cuda.synchronize(p.device)
    return True
