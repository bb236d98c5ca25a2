/* km_python.c — `require "km.python"`: CPython loaded into this process at run time.
 *
 *   python.available()              -> true | nil, why, "NO_PYTHON"
 *   python.info()                   -> { version, library, executable, home } | nil, why, code
 *   python.exec(code [, chunkname [, limit]]) -> true | nil, traceback, "PYTHON_ERROR"
 *   python.eval(expr [, limit])     -> nil (None) | boolean | integer | number | string
 *                                      | nil, traceback, "PYTHON_ERROR" | nil, why, "PYTHON_TYPE"
 *   python.import(path [, name [, limit]]) -> true | nil, traceback, code   (a .py file as
 *                                      module `name`, default its base name; loaded once per name)
 *   python.call(module, fn [, json_args [, limit]]) -> JSON text of fn(*args) (args a JSON
 *                                      array, or an object for keyword arguments) | nil, traceback, code
 *   limit = { timeout = seconds, label = text }: the call is stopped at its deadline and
 *   returns nil, "... did not return within N s" and a traceback, "TIMEOUT" (below).
 *   python.stream_handle([stream])  -> the CUstream of a km.Stream (nil: the current stream)
 *                                      as an integer, for torch.cuda.ExternalStream
 *   python.background(code [, chunkname]) -> true | nil, why: runs code on a thread of its
 *                                      own (one at a time, no deadline), e.g. a slow import
 *                                      while this thread does CUDA work; a later call that
 *                                      imports the same module waits for it (Python's import lock)
 *   python.background_state()       -> "none" | "running" | "done" | "failed", traceback
 *
 * Which Python: KM_PYTHON names a python executable (a path or a name on PATH) or a
 * libpython3.X.so (a path or a soname); without it, `python3` on PATH. An executable is
 * asked once for its sysconfig (LIBDIR, MULTIARCH, LDLIBRARY, INSTSONAME, base prefix,
 * sys.path), its shared libpython is dlopen'ed RTLD_GLOBAL (extension modules such as torch
 * resolve the C API from it), and the embedded interpreter gets that executable's sys.path
 * and sys.executable, so a venv or pyenv Python and its site-packages work as they do from
 * the shell. libpython is never linked: kmrun builds and runs where there is no Python,
 * and says why here.
 *
 * No Python.h: the 18 C API functions used are declared below, PyObject opaque (functions
 * every libpython 3.x exports; no macro, no struct layout), and resolved with dlsym:
 * python3-dev is not a build dependency, and one kmrun binary serves whichever Python 3.8+
 * the host has. Everything that needs an object's
 * layout (type checks, formatting tracebacks, JSON) happens in Python, in the dispatcher
 * BOOT below, which answers every request with a (tag, value) tuple and never raises.
 *
 * GIL: Py_InitializeEx(0) (no signal handlers: kmrun owns SIGINT), then the GIL is released
 * and every call takes it with PyGILState_Ensure/Release. No Lua call that can raise runs
 * while the GIL or a Python reference is held: results are copied into a boxed C buffer
 * first. The interpreter lives until the process exits (never finalized: torch and other
 * extension modules do not survive Py_Finalize).
 *
 * Deadlines (a limit's timeout): a watchdog thread, started on the first call that has one,
 * trips KM_PYTHON_SIGNAL at the calling thread when the deadline passes. BOOT installed a
 * Python-level handler for that signal (signal.signal, from the main thread), so a loop
 * stops at its next bytecode and a blocking sleep or read returns EINTR and raises: the
 * handler raises _kmrun.Stop, a BaseException (an `except Exception` in the code does not
 * catch it), and the stop is tripped again every second while the call has not returned,
 * so an `except BaseException` that swallows it does not either. A caller such as
 * kb_bridge.py turns the Stop into its own error; otherwise the call returns nil, text,
 * "TIMEOUT". Code stuck in C that never returns to the interpreter (or that blocks the
 * signal) cannot be stopped in this process: when the call has not returned a grace period
 * after the deadline (as long again as the timeout, 2 to 10 s), the watchdog prints one
 * line naming the call's label and ends the process with status 124 (KM_PY_STUCK_STATUS),
 * timeout(1)'s; a GPU worker's parent sees a dead worker, as it would have killed it at the
 * task's timeout anyway.
 * While a call with a deadline runs, SIGINT and SIGTERM (when kmrun has a handler for them:
 * lua.c's Ctrl-C, km.signal) stop it the same way, code "INTERRUPTED"; the signal is then
 * raised again once the call has returned, so kmrun's own handler sees it as if it had
 * just arrived (a Ctrl-C ends kmrun with status 130). A second one during the call ends
 * the process at once, as a second Ctrl-C does elsewhere. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_cuda.h"
#include "km_signal.h"

extern char **environ;

#define KM_PYBOX_MT "km.PyBox"
#define PROBE_TIMEOUT_MS 30000
#define PROBE_MAX (1 << 20)
#define KM_PYTHON_SIGNAL (SIGRTMAX - 7) /* km_limits.c's timer uses SIGRTMAX - 6 */
#define KM_PY_STUCK_STATUS 124          /* a call stuck past its deadline and grace */
#define REFIRE_MS 1000                  /* a stop not yet obeyed is tripped again this often */

/* ---- the C API, declared by hand (PyObject is opaque here) ---- */

typedef struct km_pyobject PyObject;
enum { PY_FILE_INPUT = 257 }; /* Py_file_input: a module's worth of statements */

static struct {
  void (*InitializeEx)(int);
  int (*IsInitialized)(void);
  const char *(*GetVersion)(void);
  void *(*EvalSaveThread)(void);
  int (*GILEnsure)(void); /* PyGILState_STATE is an enum */
  void (*GILRelease)(int);
  PyObject *(*RunString)(const char *, int, PyObject *, PyObject *, void *);
  PyObject *(*DictNew)(void);
  PyObject *(*DictGetItemString)(PyObject *, const char *); /* borrowed */
  PyObject *(*CallObjArgs)(PyObject *, ...);
  PyObject *(*BytesFrom)(const char *, ssize_t);
  int (*BytesAs)(PyObject *, char **, ssize_t *);
  PyObject *(*TupleGetItem)(PyObject *, ssize_t); /* borrowed */
  long long (*LongAsLongLong)(PyObject *);
  double (*FloatAsDouble)(PyObject *);
  void (*DecRef)(PyObject *);
  void (*ErrPrint)(void);
  void (*ErrClear)(void);
} py;

static const struct { const char *name; size_t off; } SYMS[] = {
#define S(f, n) {n, offsetof(__typeof__(py), f)}
  S(InitializeEx, "Py_InitializeEx"),       S(IsInitialized, "Py_IsInitialized"),
  S(GetVersion, "Py_GetVersion"),           S(EvalSaveThread, "PyEval_SaveThread"),
  S(GILEnsure, "PyGILState_Ensure"),        S(GILRelease, "PyGILState_Release"),
  S(RunString, "PyRun_StringFlags"),        S(DictNew, "PyDict_New"),
  S(DictGetItemString, "PyDict_GetItemString"), S(CallObjArgs, "PyObject_CallFunctionObjArgs"),
  S(BytesFrom, "PyBytes_FromStringAndSize"), S(BytesAs, "PyBytes_AsStringAndSize"),
  S(TupleGetItem, "PyTuple_GetItem"),       S(LongAsLongLong, "PyLong_AsLongLong"),
  S(FloatAsDouble, "PyFloat_AsDouble"),     S(DecRef, "Py_DecRef"),
  S(ErrPrint, "PyErr_Print"),             S(ErrClear, "PyErr_Clear"),
#undef S
};

/* ---- the dispatcher: run(op, a, b, c, limit) -> (tag, value); every argument is bytes ----
 * Tags: ok, none, true, false, int, float, str (bytes), err (a traceback), type (no Lua
 * value), stop (the call was stopped: what, why and a traceback). Tracebacks leave out the
 * dispatcher's own frame. limit: the call's timeout in seconds as text ('' for none), for
 * messages; the deadline itself is kept by the watchdog. _on_stop is the handler for
 * KM_PYTHON_SIGNAL (_setup installs it); stop_why, read through ctypes, says what tripped it
 * (nothing: a late trip of a call that has returned, ignored). */
static const char BOOT[] =
  "import sys, os, json, signal, traceback, types, importlib, importlib.util\n"
  "_main = sys.modules['__main__'].__dict__\n"
  "class Stop(BaseException):\n"
  "    '''A call into kmrun's interpreter stopped: code TIMEOUT or INTERRUPTED (km_python.c).'''\n"
  "    def __init__(self, code, text):\n"
  "        super().__init__(text)\n"
  "        self.code = code\n"
  "sys.modules['_kmrun'] = types.ModuleType('_kmrun')\n"
  "sys.modules['_kmrun'].Stop = Stop\n"
  "_limit = [None]  # the timeout of the call in flight (text)\n"
  "_why = None      # km_python.c's stop_why; without ctypes every trip is the deadline\n"
  "def _on_stop(signum, frame):\n"
  "    w = _why.value if _why is not None else 1\n"
  "    if _limit[0] is None or not w: return\n"
  "    if w == 1: raise Stop('TIMEOUT', 'did not return within %s s' % _limit[0])\n"
  "    raise Stop('INTERRUPTED', 'was interrupted (%s)' % signal.Signals(w).name)\n"
  "def _b(s): return s.encode('utf-8', 'surrogateescape')\n"
  "def _s(b): return b.decode('utf-8', 'surrogateescape')\n"
  "def _val(v):\n"
  "    if v is None: return (b'none', None)\n"
  "    if v is True: return (b'true', None)\n"
  "    if v is False: return (b'false', None)\n"
  "    if isinstance(v, int):\n"
  "        return (b'int', v) if -2**63 <= v < 2**63 else (b'float', float(v))\n"
  "    if isinstance(v, float): return (b'float', v)\n"
  "    if isinstance(v, str): return (b'str', _b(v))\n"
  "    if isinstance(v, bytes): return (b'str', v)\n"
  "    return (b'type', _b('a Python %s has no Lua value (None, bool, int, float, str and bytes do;'\n"
  "                       ' python.call returns JSON)' % type(v).__name__))\n"
  "def _setup(probe, home_set, stop):\n"
  "    f = _s(probe).split('\\0') if probe else []\n"
  "    if len(f) >= 11:\n"
  "        sys.executable = f[9]\n"
  "        sys.path[:] = [p for p in f[11:] if p]\n"
  "    sys.argv = ['kmrun']\n"
  "    if home_set == b'1': os.environ.pop('PYTHONHOME', None)\n"
  "    signum, addr = (int(x) for x in _s(stop).split())\n"
  "    global _why\n"
  "    try:\n"
  "        import ctypes\n"
  "        _why = ctypes.c_int.from_address(addr)\n"
  "    except ImportError: pass\n"
  "    try: signal.signal(signum, _on_stop)\n"
  "    except ValueError: pass  # not the main thread (a libkmrun host): only the grace exit\n"
  "def _what(op, a, b):\n"
  "    if op == b'call': return '%s.%s()' % (_s(a), _s(b))\n"
  "    if op == b'exec': return _s(b)\n"
  "    return _s(a) if op == b'import' else 'the expression'\n"
  "def run(op, a, b, c, limit=b''):\n"
  "    _limit[0] = _s(limit) or None\n"
  "    try:\n"
  "        return _run(op, a, b, c)\n"
  "    except Stop as e:  # tripped again while _run reported the first one\n"
  "        return (b'stop', _b('%s %s' % (_what(op, a, b), e)))\n"
  "    finally:\n"
  "        _limit[0] = None\n"
  "def _run(op, a, b, c):\n"
  "    try:\n"
  "        if op == b'exec':\n"
  "            exec(compile(_s(a), _s(b), 'exec'), _main)\n"
  "            return (b'ok', None)\n"
  "        if op == b'eval':\n"
  "            return _val(eval(compile(_s(a), '<eval>', 'eval'), _main))\n"
  "        if op == b'import':\n"
  "            path, name = _s(a), _s(b)\n"
  "            old = sys.modules.get(name)\n"
  "            if old is not None and getattr(old, '__file__', None) == path: return (b'ok', None)\n"
  "            spec = importlib.util.spec_from_file_location(name, path)\n"
  "            if spec is None: raise ImportError('cannot import %s: not a Python source file' % path)\n"
  "            m = importlib.util.module_from_spec(spec)\n"
  "            sys.modules[name] = m\n"
  "            keep, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ beside it\n"
  "            try: spec.loader.exec_module(m)\n"
  "            except BaseException:\n"
  "                sys.modules.pop(name, None)\n"
  "                raise\n"
  "            finally: sys.dont_write_bytecode = keep\n"
  "            return (b'ok', None)\n"
  "        if op == b'call':\n"
  "            m = sys.modules.get(_s(a)) or importlib.import_module(_s(a))\n"
  "            f = getattr(m, _s(b))\n"
  "            args = json.loads(c) if c else []\n"
  "            r = f(**args) if isinstance(args, dict) else f(*args)\n"
  "            return (b'str', _b(json.dumps(r, allow_nan=False, separators=(',', ':'))))\n"
  "        if op == b'setup':\n"
  "            _setup(a, b, c)\n"
  "            return (b'ok', None)\n"
  "        raise ValueError('unknown op %r' % op)\n"
  "    except BaseException as e:\n"
  "        text = ''.join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))\n"
  "        if isinstance(e, Stop): return (b'stop', _b('%s %s\\n%s' % (_what(op, a, b), e, text.rstrip())))\n"
  "        return (b'err', _b(text.rstrip()))\n";

/* ---- loading: state kept for the process ---- */

static int load_state;           /* 0 not tried, 1 ready, -1 failed (not retried) */
static char load_why[2048];
static char lib_path[PATH_MAX];
static char exe_path[PATH_MAX];
static char home[2 * PATH_MAX + 2];
static PyObject *dispatcher;     /* run(); its globals dict is kept alive through it */
/* Why the call in flight must stop: 0, STOP_DEADLINE, or the signal (SIGINT, SIGTERM) that
 * interrupted it. Written by the watchdog and the signal handlers, read by BOOT's _on_stop
 * (through ctypes: the address travels in the setup request). */
enum { STOP_DEADLINE = 1 };
static volatile sig_atomic_t stop_why;

static void why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void why(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(load_why, sizeof load_why, "no Python: ");
  vsnprintf(load_why + n, sizeof load_why - n, fmt, ap);
  va_end(ap);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The probe prints, NUL-separated: a marker, X.Y, LIBDIR, MULTIARCH, LDLIBRARY, INSTSONAME,
 * LIBPL, base_prefix, base_exec_prefix, stdlib, executable, prefix, then sys.path. The
 * fields from X.Y on are what BOOT's _setup() reads as f[0..] (executable f[9], sys.path
 * from f[11]; '' — the probe's current directory — is dropped). */
static const char PROBE[] =
  "import sys, sysconfig\n"
  "v = lambda k: str(sysconfig.get_config_var(k) or '')\n"
  "f = ['%d.%d' % sys.version_info[:2], v('LIBDIR'), v('MULTIARCH'), v('LDLIBRARY'),\n"
  "     v('INSTSONAME'), v('LIBPL'), sys.base_prefix, sys.base_exec_prefix,\n"
  "     sysconfig.get_path('stdlib') or '', sys.executable, sys.prefix] + sys.path\n"
  "sys.stdout.write('KMPY1\\0' + '\\0'.join(f))\n";

enum { F_VER, F_LIBDIR, F_MULTIARCH, F_LDLIBRARY, F_SONAME, F_LIBPL, F_BASE, F_BASE_EXEC,
       F_STDLIB, F_EXE, F_PREFIX, F_NFIXED };

/* Runs `exe -c PROBE` (no shell; not -I or -E: the user's PYTHONPATH and site-packages
 * belong in the embedded sys.path), its output in *out (malloc'd, NUL-terminated, n bytes). */
static int run_probe(const char *exe, char **out, size_t *n) {
  int fd[2];
  if (pipe2(fd, O_CLOEXEC) != 0) { why("pipe: %s", strerror(errno)); return -1; }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  char *argv[] = {(char *)exe, "-c", (char *)PROBE, NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, exe, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd[1]);
  if (rc != 0) {
    close(fd[0]);
    why("cannot run %s (%s)%s", exe, strerror(rc),
        getenv("KM_PYTHON") ? "" : "; set KM_PYTHON to a python executable or a libpython3.X.so");
    return -1;
  }
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  double deadline = now_ms() + PROBE_TIMEOUT_MS;
  int timed_out = 0;
  while (buf) {
    int left = (int)(deadline - now_ms());
    if (left <= 0) { timed_out = 1; break; }
    struct pollfd p = {fd[0], POLLIN, 0};
    int r = poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) { timed_out = r == 0; break; }
    if (len + 1 >= cap) {
      if (cap >= PROBE_MAX) break;
      char *nb = realloc(buf, cap * 2);
      if (!nb) { free(buf); buf = NULL; break; }
      buf = nb, cap *= 2;
    }
    ssize_t got = read(fd[0], buf + len, cap - len - 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    len += (size_t)got;
  }
  close(fd[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!buf) { why("out of memory reading %s's answer", exe); return -1; }
  buf[len] = '\0';
  if (timed_out) { why("%s did not answer within %d s", exe, PROBE_TIMEOUT_MS / 1000); free(buf); return -1; }
  if (len < 6 || memcmp(buf, "KMPY1", 6) != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    for (size_t i = 0; i < len; i++) if (buf[i] == '\0') buf[i] = ' ';
    /* a program that printed nothing, or not Python's traceback, is not a Python at all */
    int python = strstr(buf, "Traceback") != NULL || strstr(buf, "Error") != NULL;
    if (!python) for (size_t i = 0; i < len; i++) if (buf[i] == '\n') buf[i] = ' ';
    why("%s %s (%s %d%s%.*s)%s", exe,
        python ? "failed to describe itself" : "is not a Python: it did not run `-c` as Python does",
        WIFEXITED(status) ? "exit status" : "signal",
        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
        len ? ", it printed: " : ", it printed nothing", python ? 300 : 80, buf,
        python ? "" : "; KM_PYTHON must name a python executable or a libpython3.X.so");
    free(buf);
    return -1;
  }
  *out = buf, *n = len;
  return 0;
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int looks_like_lib(const char *s) { return strstr(s, ".so") != NULL; }

/* lib_path = the file the loader actually mapped (a soname resolves to a path). */
static void set_lib_path(void *h, const char *fallback) {
  struct link_map *lm = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0] == '/')
    snprintf(lib_path, sizeof lib_path, "%s", lm->l_name);
  else
    snprintf(lib_path, sizeof lib_path, "%s", fallback);
}

/* dlopens the first candidate that loads; *tried collects what was looked for. */
static void *open_lib(const char *const *f, char *tried, size_t tn) {
  const char *dirs[5] = {f[F_LIBDIR], NULL, f[F_LIBPL], NULL, NULL};
  char d1[PATH_MAX], d3[PATH_MAX], d4[PATH_MAX];
  if (*f[F_MULTIARCH]) snprintf(d1, sizeof d1, "%s/%s", f[F_LIBDIR], f[F_MULTIARCH]), dirs[1] = d1;
  snprintf(d3, sizeof d3, "%s/lib", f[F_BASE]), dirs[3] = d3;
  if (*f[F_MULTIARCH]) snprintf(d4, sizeof d4, "%s/lib/%s", f[F_BASE], f[F_MULTIARCH]), dirs[4] = d4;
  char n2[64], n3[64];
  snprintf(n2, sizeof n2, "libpython%s.so.1.0", f[F_VER]);
  snprintf(n3, sizeof n3, "libpython%s.so", f[F_VER]);
  const char *names[4] = {f[F_SONAME], looks_like_lib(f[F_LDLIBRARY]) ? f[F_LDLIBRARY] : "", n2, n3};
  size_t used = 0;
  tried[0] = '\0';
  for (int i = 0; i < 5; i++) {
    if (!dirs[i] || !*dirs[i]) continue;
    for (int j = 0; j < 4; j++) {
      if (!*names[j]) continue;
      char p[PATH_MAX];
      snprintf(p, sizeof p, "%s/%s", dirs[i], names[j]);
      if (!is_file(p)) continue;
      void *h = dlopen(p, RTLD_NOW | RTLD_GLOBAL);
      if (h) { snprintf(lib_path, sizeof lib_path, "%s", p); return h; }
      const char *e = dlerror();
      used += snprintf(tried + used, used < tn ? tn - used : 0, "%s (%s); ", p, e ? e : "?");
    }
    if (used < tn) used += snprintf(tried + used, tn - used, "%s; ", dirs[i]);
  }
  /* Last, the dynamic linker's own search (ld.so.cache): Debian's libpython3.X package. */
  void *h = dlopen(n2, RTLD_NOW | RTLD_GLOBAL);
  if (h) set_lib_path(h, n2);
  else if (used < tn) snprintf(tried + used, tn - used, "%s in the linker's path", n2);
  return h;
}

/* For KM_PYTHON=libpython3.X.so: the prefix is the folder above lib/ (or lib/<multiarch>/). */
static void home_from_lib(const char *lib, const char *ver, char *out, size_t n) {
  char d[PATH_MAX];
  out[0] = '\0';
  if (!realpath(lib, d)) snprintf(d, sizeof d, "%s", lib);
  for (int up = 0; up < 3; up++) {
    char *slash = strrchr(d, '/');
    if (!slash) return;
    *slash = '\0';
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/lib/python%s/encodings", d, ver);
    if (is_dir(p)) { snprintf(out, n, "%s", d); return; }
  }
}

static int resolve(void *h) {
  for (size_t i = 0; i < sizeof SYMS / sizeof *SYMS; i++) {
    void *p = dlsym(h, SYMS[i].name);
    if (!p) { why("%s lacks %s", lib_path, SYMS[i].name); return -1; }
    memcpy((char *)&py + SYMS[i].off, &p, sizeof p);
  }
  return 0;
}

/* What load() learnt of KM_PYTHON before the interpreter starts. */
typedef struct {
  char *probe;              /* the probe's answer (malloc'd; NULL when KM_PYTHON named a library) */
  size_t probe_n;
  const char *f[F_NFIXED];  /* its fields, pointing into probe */
  char ver[16];             /* the probed Python's version, else the library's */
} py_found;

/* Opens libpython: KM_PYTHON's library itself, or the one its probed executable names.
 * -> the handle, or NULL (why() says why). */
static void *open_python(const char *target, py_found *pf) {
  const char *base = strrchr(target, '/');
  base = base ? base + 1 : target;
  if (!strncmp(base, "lib", 3) && looks_like_lib(base)) { /* a path, or a soname the linker finds */
    void *h = dlopen(target, RTLD_NOW | RTLD_GLOBAL);
    if (!h) { const char *e = dlerror(); why("cannot load KM_PYTHON=%s (%s)", target, e ? e : "?"); return NULL; }
    set_lib_path(h, target);
    return h;
  }
  if (run_probe(target, &pf->probe, &pf->probe_n) != 0) return NULL;
  size_t pos = 6; /* past "KMPY1\0" */
  for (int i = 0; i < F_NFIXED; i++) {
    pf->f[i] = pos <= pf->probe_n ? pf->probe + pos : "";
    pos += strlen(pf->f[i]) + 1;
  }
  snprintf(exe_path, sizeof exe_path, "%s", pf->f[F_EXE]);
  snprintf(pf->ver, sizeof pf->ver, "%s", pf->f[F_VER]);
  char tried[1024];
  void *h = open_lib(pf->f, tried, sizeof tried);
  if (!h)
    why("%s (Python %s) has no shared libpython%s: looked in %s. Install it (Debian/Ubuntu: "
        "apt install libpython%s, or libpython%st64), use a Python built with --enable-shared, "
        "or set KM_PYTHON to a python executable or libpython%s.so that has one",
        exe_path, pf->ver, pf->ver, tried, pf->ver, pf->ver, pf->ver);
  return h;
}

/* The library's version must be the probed one: its stdlib is the one sys.path names. */
static int check_version(py_found *pf) {
  int lmaj = 0, lmin = 0, pmaj = -1, pmin = -1;
  sscanf(py.GetVersion(), "%d.%d", &lmaj, &lmin);
  if (!*pf->ver) snprintf(pf->ver, sizeof pf->ver, "%d.%d", lmaj, lmin);
  else if (sscanf(pf->ver, "%d.%d", &pmaj, &pmin) != 2 || pmaj != lmaj || pmin != lmin) {
    why("%s is Python %d.%d but %s is Python %s", lib_path, lmaj, lmin, exe_path, pf->ver);
    return -1;
  }
  return 0;
}

/* Where the standard library is (into `home`): Py_InitializeEx aborts the process when it
 * cannot find it, so it is checked first, and named through PYTHONHOME for the
 * initialization only (a relocated Python's compiled-in prefix is wrong; a venv's base is
 * the right home). */
static int find_home(const py_found *pf) {
  const char *const *f = pf->f;
  if (f[F_BASE] && *f[F_BASE]) {
    char enc[PATH_MAX + 16];
    snprintf(enc, sizeof enc, "%s/encodings", f[F_STDLIB]);
    if (!is_dir(enc)) { why("%s's standard library %s has no encodings package", exe_path, f[F_STDLIB]); return -1; }
    if (strcmp(f[F_BASE], f[F_BASE_EXEC]) == 0) snprintf(home, sizeof home, "%s", f[F_BASE]);
    else snprintf(home, sizeof home, "%s:%s", f[F_BASE], f[F_BASE_EXEC]);
    return 0;
  }
  home_from_lib(lib_path, pf->ver, home, sizeof home);
  if (!*home && !getenv("PYTHONHOME")) {
    why("cannot find the standard library (lib/python%s/encodings) above %s; set KM_PYTHON "
        "to the python executable instead", pf->ver, lib_path);
    return -1;
  }
  return 0;
}

/* Initializes the interpreter unless the process already has one, and releases the GIL.
 * -> whether PYTHONHOME was set for it. */
static int start_interpreter(void) {
  int home_set = 0;
  if (!py.IsInitialized()) {
    if (*home && !getenv("PYTHONHOME")) home_set = setenv("PYTHONHOME", home, 1) == 0;
    py.InitializeEx(0);
    if (home_set) unsetenv("PYTHONHOME");
    py.EvalSaveThread(); /* from here on, every entry takes the GIL */
  }
  return home_set;
}

/* Runs kmrun's dispatcher and its "setup" (sys.path from the probe, the stop handler).
 * -> 0, or -1 (why() says why). */
static int run_setup(const py_found *pf, int home_set) {
  const char *probe = pf->probe;
  size_t probe_n = pf->probe_n;
  int g = py.GILEnsure();
  PyObject *globals = py.DictNew();
  PyObject *r = globals ? py.RunString(BOOT, PY_FILE_INPUT, globals, globals, NULL) : NULL;
  if (!r) {
    py.ErrPrint();
    why("the embedded interpreter could not run kmrun's dispatcher (traceback on stderr)");
    py.GILRelease(g);
    return -1;
  }
  py.DecRef(r);
  dispatcher = py.DictGetItemString(globals, "run"); /* borrowed; globals is never released */
  PyObject *op = py.BytesFrom("setup", 5);
  PyObject *a = py.BytesFrom(probe ? probe + 6 : "", probe ? (ssize_t)(probe_n - 6) : 0);
  PyObject *b = py.BytesFrom(home_set ? "1" : "0", 1);
  char stop[64];
  int sn = snprintf(stop, sizeof stop, "%d %llu", KM_PYTHON_SIGNAL, (unsigned long long)(uintptr_t)&stop_why);
  PyObject *c = py.BytesFrom(stop, sn);
  PyObject *res = (op && a && b && c) ? py.CallObjArgs(dispatcher, op, a, b, c, NULL) : NULL;
  if (op) py.DecRef(op);
  if (a) py.DecRef(a);
  if (b) py.DecRef(b);
  if (c) py.DecRef(c);
  char *tag = NULL, *text = NULL;
  ssize_t tn = 0, xn = 0;
  int ok = res && py.BytesAs(py.TupleGetItem(res, 0), &tag, &tn) == 0 && tn == 2 && !memcmp(tag, "ok", 2);
  if (!ok && (!res || py.BytesAs(py.TupleGetItem(res, 1), &text, &xn) != 0)) text = NULL, xn = 0, py.ErrClear();
  if (!ok) why("setting up the interpreter (sys.path, the stop handler) failed: %.*s", (int)xn, text ? text : "");
  if (res) py.DecRef(res);
  py.GILRelease(g);
  return ok ? 0 : -1;
}

/* Loads and starts the embedded Python once: load_state 1, else load_why says why not. */
static void load(void) {
  const char *env = getenv("KM_PYTHON");
  const char *target = env && *env ? env : "python3";
  py_found pf = {0};
  void *h = open_python(target, &pf);
  int ok = h && resolve(h) == 0 && check_version(&pf) == 0 && find_home(&pf) == 0 &&
           run_setup(&pf, start_interpreter()) == 0;
  free(pf.probe);
  if (ok) load_state = 1;
}

static const char *ensure(void) {
  if (load_state == 0) {
    load_state = -1;
    load();
  }
  return load_state == 1 ? NULL : load_why;
}

/* ---- deadlines: a watchdog thread and the SIGINT/SIGTERM stand-ins (header comment) ---- */

typedef struct {
  double seconds; /* 0: no deadline */
  char label[256];
} limit;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* on CLOCK_MONOTONIC */
  int ok;                 /* the thread runs */
  int armed, stopping;    /* a call is in flight; it has been told to stop */
  pthread_t caller;
  double deadline, tripped, grace; /* now_ms() times, and ms */
  limit lim;
} wd = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0, {0, ""}};
static pthread_once_t wd_once = PTHREAD_ONCE_INIT;

static void trip(void) { pthread_kill(wd.caller, KM_PYTHON_SIGNAL); }

/* Past the grace period: the interpreter is stuck where no signal reaches it. One line, the
 * output written so far (stdout only if no one holds it), and out. */
static void stuck(void) {
  char msg[512];
  int n = snprintf(msg, sizeof msg, "kmrun: %s: Python did not return within %g s, nor %g s after "
                   "being stopped (stuck in C code, or catching the stop); exiting with status %d\n",
                   *wd.lim.label ? wd.lim.label : "a Python call", wd.lim.seconds, wd.grace / 1e3,
                   KM_PY_STUCK_STATUS);
  if (ftrylockfile(stdout) == 0) { fflush(stdout); funlockfile(stdout); }
  if (write(2, msg, n > 0 && n < (int)sizeof msg ? (size_t)n : sizeof msg - 1) < 0) { /* nothing left to tell */ }
  _exit(KM_PY_STUCK_STATUS);
}

static void timed_wait(double at_ms) {
  time_t sec = (time_t)(at_ms / 1e3);
  long ns = (long)((at_ms - (double)sec * 1e3) * 1e6);
  struct timespec ts = {sec + ns / 1000000000L, ns % 1000000000L};
  pthread_cond_timedwait(&wd.cv, &wd.mu, &ts);
}

/* Trips the stop at the deadline, trips it again every REFIRE_MS until the call returns
 * (an interrupt's first trip is its signal handler's), exits past the grace period. */
static void *watchdog(void *unused) {
  (void)unused;
  pthread_mutex_lock(&wd.mu);
  for (;;) {
    if (!wd.armed) { pthread_cond_wait(&wd.cv, &wd.mu); continue; }
    double now = now_ms();
    if (now >= wd.deadline + wd.grace) stuck();
    if (!wd.stopping && (stop_why || now >= wd.deadline)) {
      if (!stop_why) { stop_why = STOP_DEADLINE; trip(); }
      wd.stopping = 1, wd.tripped = now;
    } else if (wd.stopping && now >= wd.tripped + REFIRE_MS) {
      trip();
      wd.tripped = now;
    }
    double next = now + REFIRE_MS; /* also how soon an interrupt is noticed */
    if (!wd.stopping && wd.deadline < next) next = wd.deadline;
    if (wd.deadline + wd.grace < next) next = wd.deadline + wd.grace;
    timed_wait(next);
  }
  return NULL;
}

static void wd_start(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* now_ms()'s clock */
  pthread_cond_destroy(&wd.cv);
  pthread_cond_init(&wd.cv, &ca);
  pthread_condattr_destroy(&ca);
  sigset_t all, old; /* every signal stays with the threads that handle them */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t th;
  wd.ok = pthread_create(&th, NULL, watchdog, NULL) == 0;
  if (wd.ok) pthread_detach(th);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* SIGINT/SIGTERM during a call with a deadline: the handler kmrun had is kept aside and the
 * signal raised again when the call has returned (header comment). */
static const int STOP_SIGNALS[2] = {SIGINT, SIGTERM};
static struct sigaction kept[2];
static int kept_on[2];
static volatile sig_atomic_t caught; /* the signal that arrived during the call */
static struct timespec caught_at;    /* when (the handler's own) */

static void on_stop_signal(int sig) {
  if (caught) {
    if (km_signal_ms_since(&caught_at) < KM_SIGNAL_REPEAT_MS) return; /* the same one, twice */
    signal(sig, SIG_DFL); /* a second one: end now */
    raise(sig);
    return;
  }
  clock_gettime(CLOCK_MONOTONIC, &caught_at);
  caught = sig;
  stop_why = sig;
  trip();
}

/* Arms the deadline; 0, or -1 when there is no watchdog (then the call runs unbounded). */
static int stop_begin(const limit *lim) {
  pthread_once(&wd_once, wd_start);
  if (!wd.ok) return -1;
  stop_why = 0, caught = 0;
  pthread_mutex_lock(&wd.mu);
  wd.caller = pthread_self(); /* before the handlers below: they trip it */
  wd.lim = *lim;
  wd.deadline = now_ms() + lim->seconds * 1e3;
  wd.grace = lim->seconds < 2 ? 2e3 : lim->seconds > 10 ? 10e3 : lim->seconds * 1e3;
  wd.armed = 1, wd.stopping = 0;
  pthread_cond_signal(&wd.cv);
  pthread_mutex_unlock(&wd.mu);
  for (int i = 0; i < 2; i++) {
    struct sigaction cur, sa;
    kept_on[i] = sigaction(STOP_SIGNALS[i], NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
                 cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN;
    if (!kept_on[i]) continue;
    kept[i] = cur;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(STOP_SIGNALS[i], &sa, NULL);
  }
  return 0;
}

/* Disarms; the handlers back as they were (whoever replaced them during the call). Returns
 * what stopped the call (stop_why) and in *sig a signal to raise again, or 0. */
static int stop_end(int *sig) {
  pthread_mutex_lock(&wd.mu);
  wd.armed = 0;
  pthread_mutex_unlock(&wd.mu);
  for (int i = 0; i < 2; i++)
    if (kept_on[i]) sigaction(STOP_SIGNALS[i], &kept[i], NULL), kept_on[i] = 0;
  *sig = caught;
  return stop_why;
}

/* A limit table at stack index idx (nil: none) into *lim. */
static void check_limit(lua_State *L, int idx, limit *lim) {
  lim->seconds = 0, lim->label[0] = '\0';
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  int isnum = 0;
  lua_getfield(L, idx, "timeout");
  double s = lua_tonumberx(L, -1, &isnum);
  luaL_argcheck(L, lua_isnil(L, -1) || (isnum && s > 0), idx, "limit.timeout: seconds (> 0) expected");
  lim->seconds = isnum ? (s > 1e9 ? 1e9 : s) : 0;
  lua_getfield(L, idx, "label");
  const char *label = lua_tostring(L, -1);
  if (label) snprintf(lim->label, sizeof lim->label, "%s", label);
  lua_pop(L, 2);
}

/* ---- results cross over through a box (a C buffer freed by __gc if Lua raises) ---- */

typedef struct { char *p; size_t n; } pybox;

static int box_gc(lua_State *L) {
  pybox *b = luaL_checkudata(L, 1, KM_PYBOX_MT);
  free(b->p);
  b->p = NULL;
  return 0;
}

/* One request to the dispatcher, under lim's deadline. Pushes the Lua results and returns
 * their count. */
/* The dispatcher's answer, read while the GIL is held: its tag ("ok", "int", "str", "err",
 * ...), and its value (a number here, text in the box). */
typedef struct {
  char tag[8];
  long long iv;
  double dv;
} py_answer;

/* Reads the dispatcher's (tag, value) tuple into ans and box; the GIL is held. */
static void read_answer(PyObject *res, pybox *box, py_answer *ans) {
  char *s = NULL;
  ssize_t n = 0;
  if (py.BytesAs(py.TupleGetItem(res, 0), &s, &n) == 0 && n > 0 && n < (ssize_t)sizeof ans->tag) {
    memcpy(ans->tag, s, (size_t)n);
    ans->tag[n] = '\0';
  }
  const char *tag = ans->tag;
  PyObject *v = py.TupleGetItem(res, 1);
  if (!strcmp(tag, "int")) ans->iv = py.LongAsLongLong(v);
  else if (!strcmp(tag, "float")) ans->dv = py.FloatAsDouble(v);
  else if (!strcmp(tag, "str") || !strcmp(tag, "err") || !strcmp(tag, "type") || !strcmp(tag, "stop")) {
    if (py.BytesAs(v, &s, &n) == 0 && (box->p = malloc((size_t)n + 1))) {
      memcpy(box->p, s, (size_t)n);
      box->n = (size_t)n;
    } else {
      snprintf(ans->tag, sizeof ans->tag, "nomem");
    }
  }
}

/* Pushes the answer as Lua values: the value, or nil, message, code (PYTHON_ERROR,
 * PYTHON_TYPE, TIMEOUT, INTERRUPTED). No Python state is held: Lua may raise. -> the count. */
static int push_answer(lua_State *L, const char *op, const char *secs, int why, const pybox *box,
                       const py_answer *ans) {
  const char *tag = ans->tag;
  if (!strcmp(tag, "ok") || !strcmp(tag, "true")) return lua_pushboolean(L, 1), 1;
  if (!strcmp(tag, "false")) return lua_pushboolean(L, 0), 1;
  if (!strcmp(tag, "none")) return lua_pushnil(L), 1;
  if (!strcmp(tag, "int")) return lua_pushinteger(L, (lua_Integer)ans->iv), 1;
  if (!strcmp(tag, "float")) return lua_pushnumber(L, (lua_Number)ans->dv), 1;
  if (!strcmp(tag, "str")) return lua_pushlstring(L, box->p, box->n), 1;
  if (!strcmp(tag, "err")) {
    lua_pushnil(L);
    lua_pushlstring(L, box->p, box->n);
    lua_pushliteral(L, "PYTHON_ERROR");
    return 3;
  }
  if (!strcmp(tag, "stop") || !strcmp(tag, "stopped")) {
    lua_pushnil(L);
    if (box->p) lua_pushlstring(L, box->p, box->n);
    else if (why == STOP_DEADLINE) lua_pushfstring(L, "%s: did not return within %s s", op, secs);
    else lua_pushfstring(L, "%s: was interrupted", op);
    lua_pushstring(L, why == STOP_DEADLINE || !why ? "TIMEOUT" : "INTERRUPTED");
    return 3;
  }
  if (!strcmp(tag, "type")) {
    lua_pushnil(L);
    lua_pushlstring(L, box->p, box->n);
    lua_pushliteral(L, "PYTHON_TYPE");
    return 3;
  }
  return km_fail(L, "PYTHON_ERROR", "the Python dispatcher failed (%s; details on stderr)",
                 !strcmp(tag, "nomem") ? "out of memory" : "no result");
}

static int dispatch(lua_State *L, const char *op, const char *a, size_t an, const char *b,
                    size_t bn, const char *c, size_t cn, const limit *lim) {
  const char *w = ensure();
  if (w) return km_fail(L, "NO_PYTHON", "%s", w);
  pybox *box = lua_newuserdatauv(L, sizeof *box, 0); /* [.., box] */
  box->p = NULL, box->n = 0;
  luaL_setmetatable(L, KM_PYBOX_MT);

  py_answer ans = {"", 0, 0};
  char secs[32] = "";
  int why = 0, sig = 0;
  if (lim->seconds > 0) snprintf(secs, sizeof secs, "%g", lim->seconds);
  int g = py.GILEnsure();
  PyObject *args[5] = {py.BytesFrom(op, (ssize_t)strlen(op)), py.BytesFrom(a, (ssize_t)an),
                       py.BytesFrom(b, (ssize_t)bn), py.BytesFrom(c, (ssize_t)cn),
                       py.BytesFrom(secs, (ssize_t)strlen(secs))};
  PyObject *res = NULL;
  if (args[0] && args[1] && args[2] && args[3] && args[4]) {
    int bounded = lim->seconds > 0 && stop_begin(lim) == 0;
    res = py.CallObjArgs(dispatcher, args[0], args[1], args[2], args[3], args[4], NULL);
    if (bounded) why = stop_end(&sig);
  }
  for (int i = 0; i < 5; i++) if (args[i]) py.DecRef(args[i]);
  if (!res && why) {
    py.ErrClear(); /* stopped again as the dispatcher reported the stop */
    snprintf(ans.tag, sizeof ans.tag, "stopped");
  } else if (!res) {
    py.ErrPrint(); /* only a failure of the dispatcher itself (out of memory) gets here */
    snprintf(ans.tag, sizeof ans.tag, "fail");
  } else {
    read_answer(res, box, &ans);
    py.DecRef(res);
  }
  py.GILRelease(g);
  if (sig) raise(sig); /* the Ctrl-C the call was stopped for, now to kmrun's own handler */

  int nret = push_answer(L, op, secs, why, box, &ans);
  free(box->p);
  box->p = NULL;
  lua_remove(L, -nret - 1); /* the box */
  return nret;
}

/* Under AddressSanitizer: the interpreter is never finalized, so what it and the extension
 * modules it loaded hold at exit is not a leak of kmrun's (libcrypto: Python's _hashlib,
 * whose allocations LSan's fast unwinder sees without a libpython frame; site-packages:
 * every extension module installed there, triton's nanobind bindings included, which
 * torch.compile loads). */
#if defined(__SANITIZE_ADDRESS__)
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libpython\nleak:_PyObject_Malloc\nleak:libtorch\nleak:libc10\nleak:cpython-\n"
         "leak:libcrypto\nleak:site-packages\nleak:libtriton\nleak:nanobind\n";
}
/* ... and LSan does not list the suppressions it used at exit: that table on stderr would be
 * a command's output to the tests that read it (LSAN_OPTIONS still overrides). */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "print_suppressions=0"; }
#endif

/* ---- python.background: one piece of code on a thread of its own ----
 * The thread takes the GIL like any call (PyGILState_Ensure) and runs a wrapper of its own
 * with PyRun_String, not the dispatcher: the dispatcher's run() keeps per-call state (the
 * limit) that a concurrent call must not share. The code travels hex-encoded inside the
 * wrapper (no string API is declared here); a raised exception comes back as the
 * wrapper's `_err` (bytes). Python switches threads every 5 ms, so calls from this thread
 * still run while the background code holds the GIL. */

enum { BG_NONE, BG_RUNNING, BG_DONE, BG_FAILED };
static struct {
  pthread_mutex_t mu;
  int state;
  char *wrapper; /* owned by the thread while it runs */
  char *err;
} bg = {PTHREAD_MUTEX_INITIALIZER, BG_NONE, NULL, NULL};

static void *bg_main(void *arg) {
  (void)arg;
  int g = py.GILEnsure();
  PyObject *globals = py.DictNew();
  PyObject *r = globals ? py.RunString(bg.wrapper, PY_FILE_INPUT, globals, globals, NULL) : NULL;
  char *err = NULL;
  if (!r) {
    py.ErrPrint();
    err = strdup("python.background: the wrapper did not run (traceback on stderr)");
  } else {
    py.DecRef(r);
    PyObject *e = py.DictGetItemString(globals, "_err"); /* borrowed; absent when it ran */
    char *t = NULL;
    ssize_t n = 0;
    if (e && py.BytesAs(e, &t, &n) == 0 && (err = malloc((size_t)n + 1))) {
      memcpy(err, t, (size_t)n);
      err[n] = '\0';
    } else if (e) {
      py.ErrClear();
      err = strdup("python.background: failed (no traceback)");
    }
  }
  if (globals) py.DecRef(globals);
  py.GILRelease(g);
  pthread_mutex_lock(&bg.mu);
  free(bg.wrapper);
  bg.wrapper = NULL;
  bg.err = err;
  bg.state = err ? BG_FAILED : BG_DONE;
  pthread_mutex_unlock(&bg.mu);
  return NULL;
}

static void hex_into(char *out, const char *s, size_t n) {
  static const char H[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) out[2 * i] = H[(unsigned char)s[i] >> 4], out[2 * i + 1] = H[(unsigned char)s[i] & 15];
  out[2 * n] = '\0';
}

static int l_background(lua_State *L) {
  size_t n, cn;
  const char *code = luaL_checklstring(L, 1, &n);
  const char *chunk = luaL_optlstring(L, 2, "<km.python background>", &cn);
  const char *w = ensure();
  if (w) return km_fail(L, "NO_PYTHON", "%s", w);
  static const char FMT[] =
      "import traceback\n"
      "try:\n"
      "    exec(compile(bytes.fromhex('%s').decode(), bytes.fromhex('%s').decode(), 'exec'), {'__name__': '__kmrun_background__'})\n"
      "except BaseException:\n"
      "    _err = traceback.format_exc().encode()\n";
  char *hc = malloc(2 * n + 1), *hn = malloc(2 * cn + 1);
  size_t wn = sizeof FMT + 2 * n + 2 * cn;
  char *wrapper = malloc(wn);
  if (!hc || !hn || !wrapper) {
    free(hc), free(hn), free(wrapper);
    return km_fail(L, "ENOMEM", "python.background: out of memory");
  }
  hex_into(hc, code, n), hex_into(hn, chunk, cn);
  snprintf(wrapper, wn, FMT, hc, hn);
  free(hc), free(hn);
  pthread_mutex_lock(&bg.mu);
  if (bg.state == BG_RUNNING) {
    pthread_mutex_unlock(&bg.mu);
    free(wrapper);
    return km_fail(L, "BUSY", "python.background: the code started earlier is still running");
  }
  free(bg.err);
  bg.err = NULL;
  bg.wrapper = wrapper;
  bg.state = BG_RUNNING;
  pthread_attr_t attr;
  pthread_t th;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&th, &attr, bg_main, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    free(bg.wrapper);
    bg.wrapper = NULL;
    bg.state = BG_NONE;
    pthread_mutex_unlock(&bg.mu);
    return km_fail(L, "EAGAIN", "python.background: no thread: %s", strerror(rc));
  }
  pthread_mutex_unlock(&bg.mu);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_background_state(lua_State *L) {
  static const char *const NAMES[] = {"none", "running", "done", "failed"};
  pthread_mutex_lock(&bg.mu);
  int st = bg.state;
  lua_pushstring(L, NAMES[st]);
  if (st == BG_FAILED) lua_pushstring(L, bg.err ? bg.err : "");
  pthread_mutex_unlock(&bg.mu);
  return st == BG_FAILED ? 2 : 1;
}

/* ---- Lua API ---- */

static int l_available(lua_State *L) {
  const char *w = ensure();
  if (w) return km_fail(L, "NO_PYTHON", "%s", w);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_info(lua_State *L) {
  const char *w = ensure();
  if (w) return km_fail(L, "NO_PYTHON", "%s", w);
  lua_createtable(L, 0, 4);
  const char *v = py.GetVersion();
  lua_pushlstring(L, v, strcspn(v, " "));
  lua_setfield(L, -2, "version");
  lua_pushstring(L, lib_path);
  lua_setfield(L, -2, "library");
  if (*exe_path) { lua_pushstring(L, exe_path); lua_setfield(L, -2, "executable"); }
  if (*home) { lua_pushstring(L, home); lua_setfield(L, -2, "home"); }
  return 1;
}

static int l_exec(lua_State *L) {
  size_t n, cn;
  const char *code = luaL_checklstring(L, 1, &n);
  const char *chunk = luaL_optlstring(L, 2, "<km.python>", &cn);
  limit lim;
  check_limit(L, 3, &lim);
  return dispatch(L, "exec", code, n, chunk, cn, "", 0, &lim);
}

static int l_eval(lua_State *L) {
  size_t n;
  const char *expr = luaL_checklstring(L, 1, &n);
  limit lim;
  check_limit(L, 2, &lim);
  return dispatch(L, "eval", expr, n, "", 0, "", 0, &lim);
}

static int l_import(lua_State *L) {
  size_t pn, nn;
  const char *path = luaL_checklstring(L, 1, &pn);
  const char *name = luaL_optlstring(L, 2, NULL, &nn);
  limit lim;
  check_limit(L, 3, &lim);
  if (!name) { /* the file's base name without .py */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    if (bl > 3 && !strcmp(base + bl - 3, ".py")) bl -= 3;
    lua_pushlstring(L, base, bl);
    name = lua_tolstring(L, -1, &nn);
  }
  luaL_argcheck(L, nn > 0, 2, "empty module name");
  char real[PATH_MAX];
  if (!realpath(path, real)) return km_fail(L, "ENOENT", "python.import: %s: %s", path, strerror(errno));
  return dispatch(L, "import", real, strlen(real), name, nn, "", 0, &lim);
}

static int l_call(lua_State *L) {
  size_t mn, fn, an = 0;
  const char *mod = luaL_checklstring(L, 1, &mn);
  const char *func = luaL_checklstring(L, 2, &fn);
  const char *args = luaL_optlstring(L, 3, "", &an);
  limit lim;
  check_limit(L, 4, &lim);
  return dispatch(L, "call", mod, mn, func, fn, args, an, &lim);
}

static int l_stream_handle(lua_State *L) {
  if (lua_type(L, 1) == LUA_TNUMBER) { lua_pushinteger(L, luaL_checkinteger(L, 1)); return 1; }
  if (lua_islightuserdata(L, 1)) { lua_pushinteger(L, (lua_Integer)(intptr_t)lua_touserdata(L, 1)); return 1; }
  lua_pushinteger(L, (lua_Integer)(intptr_t)km_stream_opt(L, 1));
  return 1;
}

int luaopen_km_python(lua_State *L) {
  if (luaL_newmetatable(L, KM_PYBOX_MT)) {
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {
      {"available", l_available}, {"info", l_info}, {"exec", l_exec}, {"eval", l_eval},
      {"import", l_import}, {"call", l_call}, {"stream_handle", l_stream_handle},
      {"background", l_background}, {"background_state", l_background_state}, {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
