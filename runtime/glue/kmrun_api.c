/* kmrun_api.c — the public C API (include/kmrun.h) over the C core: the driver table
 * (km_cuda.c), device operations (km_devops.c), modules, kernels and launches
 * (km_kernel.c), NVRTC and its cache (km_nvrtc_core.c), compare (km_compare_core.c), the
 * store (km_store_core.c) and, for km_run_script, the embedded Lua with every km.* module
 * preloaded. The Lua set-up pieces (preload, finding the Lua library, package.path) are
 * km_api.h's, shared with the kmrun program and km.so.
 *
 * Handles are tokens, not addresses: kind (8 bits) | generation (24 bits) | slot + 1
 * (32 bits). A slot's generation moves on when it is freed, so a stale, freed or
 * wrong-kind handle is found in the table and refused (KMRUN_EHANDLE) instead of being
 * dereferenced. The table is guarded by one mutex. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "kmrun.h"
#include "km.h"
#include "km_api.h"
#include "km_sampling_core.h"
#include "km_compare_core.h"
#include "km_driver.h"
#include "km_devinfo.h"
#include "km_devops.h"
#include "km_kernel.h"
#include "km_nvrtc_core.h"
#include "km_store_core.h"
#include "km_timer_core.h"
#include "km_timer_gpu.h"

_Static_assert(sizeof(void *) == 8, "kmrun handles need 64-bit pointers");
_Static_assert(KMRUN_VERSION_NUM == KMRUN_VERSION_MAJOR * 10000 + KMRUN_VERSION_MINOR * 100 + KMRUN_VERSION_PATCH,
               "KMRUN_VERSION_NUM");

const char *km_version(void) { return KMRUN_VERSION; }
int km_version_num(void) { return KMRUN_VERSION_NUM; }

/* ==== errors (per thread) ==== */

static __thread char err_msg[2048];
static __thread char err_code[64];

const char *km_errmsg(void) { return err_msg; }
const char *km_errcode(void) { return err_code; }

const char *km_status_name(km_status s) {
  switch (s) {
  case KMRUN_OK: return "KMRUN_OK";
  case KMRUN_EINVAL: return "KMRUN_EINVAL";
  case KMRUN_EHANDLE: return "KMRUN_EHANDLE";
  case KMRUN_ENOMEM: return "KMRUN_ENOMEM";
  case KMRUN_EVERSION: return "KMRUN_EVERSION";
  case KMRUN_ENODEV: return "KMRUN_ENODEV";
  case KMRUN_ECUDA: return "KMRUN_ECUDA";
  case KMRUN_ECOMPILE: return "KMRUN_ECOMPILE";
  case KMRUN_EREFUSED: return "KMRUN_EREFUSED";
  case KMRUN_ENOTFOUND: return "KMRUN_ENOTFOUND";
  case KMRUN_EIO: return "KMRUN_EIO";
  case KMRUN_ESTORE: return "KMRUN_ESTORE";
  case KMRUN_ELUA: return "KMRUN_ELUA";
  case KMRUN_ETAMPERED: return "KMRUN_ETAMPERED";
  }
  return "KMRUN_UNKNOWN";
}

__attribute__((format(printf, 3, 4)))
static km_status fail(km_status st, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  snprintf(err_code, sizeof err_code, "%s", code ? code : km_status_name(st));
  return st;
}

/* A CUDA failure whose message is already worded (km_cuda_msg, km_kernel.c), with st. */
static km_status kernel_fail(km_status st, CUresult r, const char *msg) {
  return fail(st, km_cuda_errname(r), "%s", msg);
}

static km_status cuda_fail(CUresult r, const char *what) {
  char msg[KM_CUDA_MSG];
  return kernel_fail(KMRUN_ECUDA, r, km_cuda_msg(r, what, msg, sizeof msg));
}

static km_status need_cuda(void) {
  const char *why = NULL;
  if (km_cuda_get(&why)) return KMRUN_OK;
  return fail(KMRUN_ENODEV, "CUDA_UNAVAILABLE", "CUDA unavailable: %s", why ? why : "unknown reason");
}

/* ==== handles ==== */

enum { H_RT = 1, H_PROG, H_MOD, H_KERN, H_BUF, H_TRAJ };
static const char *const kind_name[] = {"?", "km_rt", "km_prog", "km_mod", "km_kern", "km_buf", "km_traj"};

typedef struct {
  void *obj;       /* NULL: free */
  uint32_t gen;    /* moves on at every free */
  uint8_t kind;
  uint32_t owner;  /* kernels: the slot + 1 of their module */
} slot;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static slot *slots;
static uint32_t nslots, cap_slots;

static void *mk_handle(uint8_t kind, uint32_t gen, uint32_t idx) {
  uintptr_t h = ((uintptr_t)kind << 56) | ((uintptr_t)(gen & 0xffffff) << 32) | (uintptr_t)(idx + 1);
  return (void *)h;
}

/* Registers obj; returns its handle or NULL when out of memory. */
static void *reg_add(uint8_t kind, void *obj, uint32_t owner) {
  pthread_mutex_lock(&reg_lock);
  uint32_t idx = UINT32_MAX;
  for (uint32_t i = 0; i < nslots; i++)
    if (!slots[i].obj) { idx = i; break; }
  if (idx == UINT32_MAX) {
    if (nslots == cap_slots) {
      uint32_t ncap = cap_slots ? cap_slots * 2 : 64;
      slot *ns = realloc(slots, ncap * sizeof *ns);
      if (!ns) { pthread_mutex_unlock(&reg_lock); return NULL; }
      slots = ns;
      cap_slots = ncap;
    }
    idx = nslots++;
    slots[idx].gen = 1;
  }
  slots[idx].obj = obj;
  slots[idx].kind = kind;
  slots[idx].owner = owner;
  void *h = mk_handle(kind, slots[idx].gen, idx);
  pthread_mutex_unlock(&reg_lock);
  return h;
}

/* The slot index of handle h of kind, or -1. Call with reg_lock held. */
static int64_t reg_index(const void *h, uint8_t kind) {
  uintptr_t v = (uintptr_t)h;
  if (!v || (uint8_t)(v >> 56) != kind) return -1;
  uint32_t idx = (uint32_t)(v & 0xffffffffu);
  uint32_t gen = (uint32_t)((v >> 32) & 0xffffff);
  if (idx == 0 || idx > nslots) return -1;
  idx--;
  slot *s = &slots[idx];
  if (!s->obj || s->kind != kind || (s->gen & 0xffffff) != gen) return -1;
  if (kind == H_KERN) { /* a kernel lives while its module does */
    slot *m = s->owner && s->owner <= nslots ? &slots[s->owner - 1] : NULL;
    if (!m || !m->obj || m->kind != H_MOD) return -1;
  }
  return idx;
}

static void *reg_get(const void *h, uint8_t kind) {
  pthread_mutex_lock(&reg_lock);
  int64_t i = reg_index(h, kind);
  void *obj = i < 0 ? NULL : slots[i].obj;
  pthread_mutex_unlock(&reg_lock);
  return obj;
}

/* Removes h from the table and returns its object (NULL when h is not a live handle). */
static void *reg_take(const void *h, uint8_t kind) {
  pthread_mutex_lock(&reg_lock);
  int64_t i = reg_index(h, kind);
  void *obj = NULL;
  if (i >= 0) {
    obj = slots[i].obj;
    slots[i].obj = NULL;
    slots[i].gen++;
    if (kind == H_MOD) /* its kernels go with it */
      for (uint32_t j = 0; j < nslots; j++)
        if (slots[j].obj && slots[j].kind == H_KERN && slots[j].owner == (uint32_t)i + 1) {
          free(slots[j].obj);
          slots[j].obj = NULL;
          slots[j].gen++;
        }
  }
  pthread_mutex_unlock(&reg_lock);
  return obj;
}

static km_status bad_handle(const void *h, uint8_t kind, const char *fn) {
  if (!h) return fail(KMRUN_EHANDLE, "INVALID_HANDLE", "%s: NULL %s", fn, kind_name[kind]);
  return fail(KMRUN_EHANDLE, "INVALID_HANDLE", "%s: not a live %s (freed, or another kind of handle)", fn,
              kind_name[kind]);
}

#define GET(var, type, h, kind, fn)                   \
  type *var = reg_get((h), (kind));                   \
  if (!var) return bad_handle((h), (kind), (fn))

/* ==== runtime ==== */

typedef struct { int device; } rt_obj;

km_status km_open(int header_version, int device, km_rt **out) {
  if (!out) return fail(KMRUN_EINVAL, NULL, "km_open: out is NULL");
  *out = NULL;
  int major = header_version / 10000, minor = header_version / 100 % 100;
  if (major != KMRUN_VERSION_MAJOR || minor > KMRUN_VERSION_MINOR)
    return fail(KMRUN_EVERSION, "VERSION_MISMATCH",
                "km_open: the program was built with kmrun.h %d.%d.%d but the library is %s", major, minor,
                header_version % 100, KMRUN_VERSION);
  const char *why = NULL;
  if (!km_cuda_use(device, &why))
    return fail(KMRUN_ENODEV, "CUDA_UNAVAILABLE", "CUDA unavailable: %s", why ? why : "unknown reason");
  rt_obj *rt = malloc(sizeof *rt);
  if (!rt) return fail(KMRUN_ENOMEM, NULL, "km_open: out of memory");
  rt->device = device;
  if (!(*out = reg_add(H_RT, rt, 0))) { free(rt); return fail(KMRUN_ENOMEM, NULL, "km_open: out of memory"); }
  return KMRUN_OK;
}

km_status km_close(km_rt *h) {
  rt_obj *rt = reg_take(h, H_RT);
  if (!rt) return bad_handle(h, H_RT, "km_close");
  free(rt);
  return KMRUN_OK;
}

km_status km_device(km_rt *h, km_device_info *out) {
  GET(rt, rt_obj, h, H_RT, "km_device");
  if (!out) return fail(KMRUN_EINVAL, NULL, "km_device: out is NULL");
  km_status st = need_cuda();
  if (st) return st;
  (void)rt;
  km_devinfo di;
  km_devinfo_read(km_cuda_device(), &di);
  *out = di.pub;
  return KMRUN_OK;
}

km_status km_synchronize(km_rt *h) {
  GET(rt, rt_obj, h, H_RT, "km_synchronize");
  (void)rt;
  km_status st = need_cuda();
  if (st) return st;
  CUresult r = km_cu->cuCtxSynchronize();
  return r == CUDA_SUCCESS ? KMRUN_OK : cuda_fail(r, "synchronize");
}

/* ==== compile ==== */

typedef struct { km_nvrtc_out out; } prog_obj;

km_status km_compile(const char *source, const km_compile_opts *opts, km_prog **out) {
  if (!out) return fail(KMRUN_EINVAL, NULL, "km_compile: out is NULL");
  *out = NULL;
  if (!source) return fail(KMRUN_EINVAL, NULL, "km_compile: source is NULL");
  km_compile_opts none;
  memset(&none, 0, sizeof none);
  if (!opts) opts = &none;
  char arch[32];
  if (opts->arch) {
    if (!km_nvrtc_arch_valid(opts->arch))
      return fail(KMRUN_EINVAL, NULL, "km_compile: bad architecture '%s' (want sm_NN, sm_NNa or compute_NN)",
                  opts->arch);
    snprintf(arch, sizeof arch, "%s", opts->arch);
  } else {
    int major = 0, minor = 0; /* 0: this process holds no context */
    km_cuda_current_arch(&major, &minor);
    km_nvrtc_default_arch(major, minor, arch, sizeof arch);
  }
  km_nvrtc_req req;
  memset(&req, 0, sizeof req);
  req.source = source;
  req.source_len = strlen(source);
  req.name = opts->name;
  req.arch = arch;
  req.options = opts->options;
  req.noptions = opts->options ? opts->noptions : 0;
  km_nvrtc_header stdint_h[2] = {{"cstdint", km_nvrtc_builtin_stdint, strlen(km_nvrtc_builtin_stdint)},
                                 {"stdint.h", km_nvrtc_builtin_stdint, strlen(km_nvrtc_builtin_stdint)}};
  if (strstr(source, "stdint.h") || strstr(source, "<cstdint>")) {
    req.headers = stdint_h;
    req.nheaders = 2;
  }
  char dir[4096];
  if (!opts->no_cache) {
    if (opts->cache_dir) snprintf(dir, sizeof dir, "%s", opts->cache_dir), req.cache_dir = dir;
    else if (km_nvrtc_default_cache_dir(dir, sizeof dir) == 0) req.cache_dir = dir;
  }
  prog_obj *p = calloc(1, sizeof *p);
  if (!p) return fail(KMRUN_ENOMEM, NULL, "km_compile: out of memory");
  int rc = km_nvrtc_compile_c(&req, &p->out);
  if (rc != 0) {
    km_nvrtc_out_free(&p->out);
    free(p);
    return fail(rc == KM_ENOMEM ? KMRUN_ENOMEM : KMRUN_EINVAL, NULL, "km_compile: %s", km_strerror(rc));
  }
  if (!(*out = reg_add(H_PROG, p, 0))) {
    km_nvrtc_out_free(&p->out);
    free(p);
    return fail(KMRUN_ENOMEM, NULL, "km_compile: out of memory");
  }
  if (p->out.result == KM_NVRTC_REFUSED)
    return fail(KMRUN_EREFUSED, p->out.code, "%s", p->out.message);
  if (p->out.result != 0)
    return fail(KMRUN_ECOMPILE, p->out.code, "%s\n%s", p->out.message, p->out.log ? p->out.log : "");
  return KMRUN_OK;
}

const char *km_prog_log(km_prog *h) {
  prog_obj *p = reg_get(h, H_PROG);
  if (!p) { bad_handle(h, H_PROG, "km_prog_log"); return NULL; }
  return p->out.log ? p->out.log : "";
}

const char *km_prog_key(km_prog *h) {
  prog_obj *p = reg_get(h, H_PROG);
  if (!p) { bad_handle(h, H_PROG, "km_prog_key"); return NULL; }
  return p->out.key;
}

const void *km_prog_image(km_prog *h, size_t *len) {
  prog_obj *p = reg_get(h, H_PROG);
  if (len) *len = 0;
  if (!p) { bad_handle(h, H_PROG, "km_prog_image"); return NULL; }
  if (p->out.cubin) { if (len) *len = p->out.cubin_len; return p->out.cubin; }
  if (p->out.ptx) { if (len) *len = p->out.ptx_len; return p->out.ptx; }
  return NULL;
}

int km_prog_cached(km_prog *h) {
  prog_obj *p = reg_get(h, H_PROG);
  if (!p) return bad_handle(h, H_PROG, "km_prog_cached");
  return p->out.cached;
}

km_status km_prog_free(km_prog *h) {
  prog_obj *p = reg_take(h, H_PROG);
  if (!p) return bad_handle(h, H_PROG, "km_prog_free");
  km_nvrtc_out_free(&p->out);
  free(p);
  return KMRUN_OK;
}

/* ==== modules and kernels ==== */

typedef struct { CUmodule mod; } mod_obj;
typedef struct { CUfunction fn; int nparams; size_t argbytes; char name[128]; } kern_obj;

km_status km_mod_load(km_rt *h, km_prog *ph, km_mod **out) {
  if (!out) return fail(KMRUN_EINVAL, NULL, "km_mod_load: out is NULL");
  *out = NULL;
  GET(rt, rt_obj, h, H_RT, "km_mod_load");
  (void)rt;
  size_t len;
  const void *image = km_prog_image(ph, &len);
  if (!image) {
    if (!reg_get(ph, H_PROG)) return bad_handle(ph, H_PROG, "km_mod_load");
    return fail(KMRUN_EINVAL, NULL, "km_mod_load: the program did not compile (no image)");
  }
  km_status st = need_cuda();
  if (st) return st;
  mod_obj *m = calloc(1, sizeof *m);
  if (!m) return fail(KMRUN_ENOMEM, NULL, "km_mod_load: out of memory");
  char msg[KM_KERNEL_MSG];
  CUresult r = km_kernel_load(image, &m->mod, msg, sizeof msg);
  if (r != CUDA_SUCCESS) { free(m); return kernel_fail(KMRUN_ECUDA, r, msg); }
  if (!(*out = reg_add(H_MOD, m, 0))) {
    km_kernel_unload(&m->mod);
    free(m);
    return fail(KMRUN_ENOMEM, NULL, "km_mod_load: out of memory");
  }
  return KMRUN_OK;
}

km_status km_mod_free(km_mod *h) {
  mod_obj *m = reg_take(h, H_MOD);
  if (!m) return bad_handle(h, H_MOD, "km_mod_free");
  km_kernel_unload(&m->mod);
  free(m);
  return KMRUN_OK;
}

km_status km_kern_get(km_mod *h, const char *name, km_kern **out) {
  if (!out) return fail(KMRUN_EINVAL, NULL, "km_kern_get: out is NULL");
  *out = NULL;
  if (!name) return fail(KMRUN_EINVAL, NULL, "km_kern_get: name is NULL");
  pthread_mutex_lock(&reg_lock);
  int64_t mi = reg_index(h, H_MOD);
  CUmodule mod = mi >= 0 ? ((mod_obj *)slots[mi].obj)->mod : NULL;
  pthread_mutex_unlock(&reg_lock);
  if (mi < 0) return bad_handle(h, H_MOD, "km_kern_get");
  CUfunction fn;
  int nparams = 0;
  size_t argbytes = 0;
  char msg[KM_KERNEL_MSG];
  CUresult r = km_kernel_get(mod, name, &fn, &nparams, &argbytes, msg, sizeof msg);
  if (r != CUDA_SUCCESS) return kernel_fail(KMRUN_ENOTFOUND, r, msg);
  kern_obj *k = calloc(1, sizeof *k);
  if (!k) return fail(KMRUN_ENOMEM, NULL, "km_kern_get: out of memory");
  k->fn = fn;
  k->nparams = nparams;
  k->argbytes = argbytes;
  snprintf(k->name, sizeof k->name, "%s", name);
  if (!(*out = reg_add(H_KERN, k, (uint32_t)mi + 1))) {
    free(k);
    return fail(KMRUN_ENOMEM, NULL, "km_kern_get: out of memory");
  }
  return KMRUN_OK;
}

km_status km_kern_params(km_kern *h, int *nparams, size_t *bytes) {
  GET(k, kern_obj, h, H_KERN, "km_kern_params");
  if (nparams) *nparams = k->nparams;
  if (bytes) *bytes = k->argbytes;
  return KMRUN_OK;
}

static km_status launch_fn(CUfunction fn, const char *name, int nparams, const km_launch_cfg *c, void **args) {
  if (nparams > 0 && !args) return fail(KMRUN_EINVAL, NULL, "km_launch: kernel '%s' takes %d arguments, args is NULL", name, nparams);
  km_kernel_cfg kc = {{c->grid[0], c->grid[1], c->grid[2]}, {c->block[0], c->block[1], c->block[2]}, c->shared_bytes,
                      km_cuda_stream()};
  char msg[KM_KERNEL_MSG];
  CUresult r = km_kernel_launch(fn, name, nparams, &kc, args, msg, sizeof msg);
  return r == CUDA_SUCCESS ? KMRUN_OK : kernel_fail(KMRUN_ECUDA, r, msg);
}

km_status km_launch(km_kern *h, const km_launch_cfg *cfg, void **args) {
  /* the hot path: one lock, one lookup, then the driver */
  pthread_mutex_lock(&reg_lock);
  int64_t i = reg_index(h, H_KERN);
  kern_obj k;
  if (i >= 0) k = *(kern_obj *)slots[i].obj;
  pthread_mutex_unlock(&reg_lock);
  if (i < 0) return bad_handle(h, H_KERN, "km_launch");
  if (!cfg) return fail(KMRUN_EINVAL, NULL, "km_launch: cfg is NULL");
  return launch_fn(k.fn, k.name, k.nparams, cfg, args);
}

/* ==== buffers ==== */

km_status km_buf_new(km_rt *h, km_dtype dtype, const int64_t *shape, int ndim, km_buf **out) {
  if (!out) return fail(KMRUN_EINVAL, NULL, "km_buf_new: out is NULL");
  *out = NULL;
  GET(rt, rt_obj, h, H_RT, "km_buf_new");
  (void)rt;
  if (ndim > 0 && !shape) return fail(KMRUN_EINVAL, NULL, "km_buf_new: shape is NULL");
  km_devbuf *b = calloc(1, sizeof *b);
  if (!b) return fail(KMRUN_ENOMEM, NULL, "km_buf_new: out of memory");
  const char *why = NULL;
  if (km_devbuf_init(b, dtype, shape, ndim, KM_DEFAULT_GUARD, &why)) {
    free(b);
    return fail(KMRUN_EINVAL, NULL, "km_buf_new: %s", why);
  }
  km_status st = need_cuda();
  if (st) { free(b); return st; }
  CUresult r = km_devbuf_alloc(b);
  if (r != CUDA_SUCCESS) {
    km_devbuf_free(b);
    free(b);
    return cuda_fail(r, "allocating a buffer");
  }
  if (!(*out = reg_add(H_BUF, b, 0))) {
    km_devbuf_free(b);
    free(b);
    return fail(KMRUN_ENOMEM, NULL, "km_buf_new: out of memory");
  }
  return KMRUN_OK;
}

km_status km_buf_free(km_buf *h) {
  km_devbuf *b = reg_take(h, H_BUF);
  if (!b) return bad_handle(h, H_BUF, "km_buf_free");
  km_devbuf_free(b);
  free(b);
  return KMRUN_OK;
}

km_status km_buf_info(km_buf *h, km_dtype *dtype, int64_t *numel, size_t *bytes) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_info");
  if (dtype) *dtype = b->dtype;
  if (numel) *numel = b->numel;
  if (bytes) *bytes = b->bytes;
  return KMRUN_OK;
}

km_status km_buf_ptr(km_buf *h, uint64_t *devptr) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_ptr");
  if (!devptr) return fail(KMRUN_EINVAL, NULL, "km_buf_ptr: devptr is NULL");
  *devptr = (uint64_t)b->ptr;
  return KMRUN_OK;
}

static km_status cu_result(CUresult r, const char *what) {
  return r == CUDA_SUCCESS ? KMRUN_OK : cuda_fail(r, what);
}

km_status km_buf_fill(km_buf *h, double value) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_fill");
  return cu_result(km_devbuf_fill_pattern(b, km_devbuf_pattern(b->dtype, value), km_cuda_stream()), "fill");
}

km_status km_buf_poison(km_buf *h) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_poison");
  return cu_result(km_devbuf_fill_pattern(b, km_poison_pattern(b->dtype), km_cuda_stream()), "poison");
}

km_status km_buf_random(km_buf *h, km_dist dist, double a, double c, uint64_t seed) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_random");
  int d = (int)dist;
  if (d < 0 || d > 2) return fail(KMRUN_EINVAL, NULL, "km_buf_random: unknown distribution %d", d);
  if (d == KM_UNIFORM && !km_dtype_is_float(b->dtype)) d = 2, c = c - 1; /* integers in [a, c) */
  if (d == KM_INT && c < a) return fail(KMRUN_EINVAL, NULL, "km_buf_random: c (%g) < a (%g)", c, a);
  return cu_result(km_devbuf_random(b, d, a, c, seed, km_cuda_stream()), "random");
}

km_status km_buf_upload(km_buf *h, const void *host, size_t bytes) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_upload");
  if (bytes != b->bytes) return fail(KMRUN_EINVAL, NULL, "km_buf_upload: %zu bytes for a %zu-byte buffer", bytes, b->bytes);
  if (bytes && !host) return fail(KMRUN_EINVAL, NULL, "km_buf_upload: host is NULL");
  if (!bytes) return KMRUN_OK;
  CUresult r = km_cu->cuStreamSynchronize(km_cuda_stream());
  if (r == CUDA_SUCCESS) r = km_cu->cuMemcpyHtoD(b->ptr, host, bytes);
  return cu_result(r, "upload");
}

km_status km_buf_download(km_buf *h, void *host, size_t bytes) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_download");
  if (bytes != b->bytes) return fail(KMRUN_EINVAL, NULL, "km_buf_download: %zu bytes from a %zu-byte buffer", bytes, b->bytes);
  if (bytes && !host) return fail(KMRUN_EINVAL, NULL, "km_buf_download: host is NULL");
  if (!bytes) return KMRUN_OK;
  CUresult r = km_cu->cuStreamSynchronize(km_cuda_stream());
  if (r == CUDA_SUCCESS) r = km_cu->cuMemcpyDtoH(host, b->ptr, bytes);
  return cu_result(r, "download");
}

km_status km_buf_copy(km_buf *dh, km_buf *sh) {
  GET(d, km_devbuf, dh, H_BUF, "km_buf_copy");
  GET(s, km_devbuf, sh, H_BUF, "km_buf_copy");
  if (d->bytes != s->bytes)
    return fail(KMRUN_EINVAL, NULL, "km_buf_copy: sizes differ (%zu bytes into %zu bytes)", s->bytes, d->bytes);
  if (!d->bytes) return KMRUN_OK;
  return cu_result(km_cu->cuMemcpyDtoDAsync(d->ptr, s->ptr, d->bytes, km_cuda_stream()), "copy");
}

km_status km_buf_checksum(km_buf *h, uint64_t *out) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_checksum");
  if (!out) return fail(KMRUN_EINVAL, NULL, "km_buf_checksum: out is NULL");
  return cu_result(km_devbuf_checksum(b, km_cuda_stream(), out), "checksum");
}

km_status km_buf_check_guards(km_buf *h, int *intact) {
  GET(b, km_devbuf, h, H_BUF, "km_buf_check_guards");
  if (!intact) return fail(KMRUN_EINVAL, NULL, "km_buf_check_guards: intact is NULL");
  int side;
  size_t count, off;
  CUresult r = km_devbuf_check_guards(b, intact, &side, &count, &off);
  if (r != CUDA_SUCCESS) return cuda_fail(r, "reading the guards");
  if (!*intact)
    fail(KMRUN_OK, "GUARD_OVERWRITTEN", "%s guard overwritten: %zu byte(s), %zu byte(s) %s the data",
         side ? "back" : "front", count, off, side ? "past the end of" : "before the start of");
  return KMRUN_OK;
}

/* ==== compare ==== */

static km_status read_tol(const km_tolerance *t, km_tol *out, const char *fn) {
  out->atol = t ? t->atol : 1e-8;
  out->rtol = t ? t->rtol : 1e-5;
  out->equal_nan = t ? t->equal_nan : 0;
  if (!(out->atol >= 0) || !(out->rtol >= 0))
    return fail(KMRUN_EINVAL, NULL, "%s: atol and rtol must be non-negative numbers", fn);
  return KMRUN_OK;
}

static void put_result(const km_cmp_result *r, uint64_t unwritten, km_compare_result *out) {
  memset(out, 0, sizeof *out);
  out->ok = r->ok;
  out->n = r->n;
  out->mismatches = r->mismatches;
  out->nan_got = r->nan_got;
  out->inf_got = r->inf_got;
  out->unwritten = unwritten;
  out->max_abs = r->max_abs;
  out->max_rel = r->max_rel;
  out->first = r->first;
}

km_status km_allclose(km_buf *gh, km_buf *wh, const km_tolerance *tol, km_compare_result *out) {
  GET(g, km_devbuf, gh, H_BUF, "km_allclose");
  GET(w, km_devbuf, wh, H_BUF, "km_allclose");
  if (!out) return fail(KMRUN_EINVAL, NULL, "km_allclose: out is NULL");
  if (g->dtype != w->dtype)
    return fail(KMRUN_EINVAL, NULL, "km_allclose: dtypes differ (%s vs %s)", km_dtype_name(g->dtype),
                km_dtype_name(w->dtype));
  if (g->bytes != w->bytes)
    return fail(KMRUN_EINVAL, NULL, "km_allclose: sizes differ (%zu vs %zu bytes)", g->bytes, w->bytes);
  km_tol t;
  km_status st = read_tol(tol, &t, "km_allclose");
  if (st) return st;
  km_cmp_result r;
  uint64_t unwritten = 0;
  CUresult cr = km_devcompare(g->dtype, g->ptr, w->ptr, (uint64_t)g->numel, &t, tol ? tol->count_poison : 0,
                              km_cuda_stream(), &r, &unwritten);
  if (cr != CUDA_SUCCESS) return cuda_fail(cr, "allclose");
  put_result(&r, unwritten, out);
  return KMRUN_OK;
}

km_status km_allclose_host(km_dtype dtype, const void *got, const void *want, uint64_t n, const km_tolerance *tol,
                           km_compare_result *out) {
  if (!out || (n && (!got || !want))) return fail(KMRUN_EINVAL, NULL, "km_allclose_host: NULL argument");
  if ((int)dtype < 0 || dtype >= KM_NDTYPES) return fail(KMRUN_EINVAL, NULL, "km_allclose_host: unknown dtype %d", (int)dtype);
  km_tol t;
  km_status st = read_tol(tol, &t, "km_allclose_host");
  if (st) return st;
  km_cmp_result r;
  if (km_compare_host(dtype, got, want, n, &t, &r)) return fail(KMRUN_EINVAL, NULL, "km_allclose_host: bad arguments");
  put_result(&r, 0, out);
  return KMRUN_OK;
}

/* ==== timing ==== */

_Static_assert(KM_TIME_GRAPH + 1 == KM_TIMING_NMODES, "km_time_mode is km_timing_modes' order");

/* km_time's options as the timing core's protocol: km.timing's defaults (km_sampling_core),
 * with what km_time_opts sets (0: the default; max_samples below min_samples is raised to it). */
static km_status time_protocol(const km_time_opts *opts, km_timing_protocol *p, const char *fn) {
  km_time_opts o;
  memset(&o, 0, sizeof o);
  if (opts) o = *opts;
  if (o.mode < KM_TIME_COLD || o.mode > KM_TIME_GRAPH) return fail(KMRUN_EINVAL, NULL, "%s: unknown mode %d", fn, (int)o.mode);
  km_timing_protocol_default(p);
  p->mode = km_timing_modes[o.mode];
  if (o.warmup > 0) p->warmup = o.warmup;
  if (o.min_samples > 0) p->stop.min_samples = o.min_samples;
  if (o.max_samples > 0) p->stop.max_samples = o.max_samples;
  if (p->stop.max_samples < p->stop.min_samples) p->stop.max_samples = p->stop.min_samples;
  if (o.target > 0) p->stop.max_noise = o.target;
  if (o.max_ms > 0) p->stop.max_ms = o.max_ms;
  if (o.no_gate) p->gate = 0;
  return KMRUN_OK;
}

km_status km_time_protocol_key(const km_time_opts *opts, char *buf, size_t cap) {
  km_timing_protocol p;
  km_status st = time_protocol(opts, &p, "km_time_protocol_key");
  if (st) return st;
  if (!buf) return fail(KMRUN_EINVAL, NULL, "km_time_protocol_key: buf is NULL");
  int len = km_timing_protocol_key(&p, buf, cap);
  if (len < 0 || (size_t)len >= cap)
    return fail(KMRUN_EINVAL, NULL, "km_time_protocol_key: the key needs %d bytes, buf has %zu", len + 1, cap);
  return KMRUN_OK;
}

typedef struct { km_work_fn fn; void *ud; km_status st; } time_work;

static int time_call(void *ud, km_timer_phase phase) {
  (void)phase;
  time_work *w = ud;
  return (w->st = w->fn(w->ud)) != KMRUN_OK;
}

typedef struct { CUfunction fn; const char *name; int nparams; const km_launch_cfg *cfg; void **args; } one_launch;

static km_status launch_work(void *ud) {
  one_launch *l = ud;
  return launch_fn(l->fn, l->name, l->nparams, l->cfg, l->args);
}

/* The loop is the timing core's (km_timer_core.c), km.timing's too. */
km_status km_time(km_rt *h, km_work_fn fn, void *ud, const km_time_opts *opts, km_time_result *out) {
  GET(rt, rt_obj, h, H_RT, "km_time");
  (void)rt;
  if (!fn || !out) return fail(KMRUN_EINVAL, NULL, "km_time: fn and out are required");
  km_status st = need_cuda();
  if (st) return st;
  km_timing_protocol p;
  if ((st = time_protocol(opts, &p, "km_time"))) return st;
  double *buf = malloc(sizeof(double) * KM_TIMER_BUF(p.stop.max_samples));
  if (!buf) return fail(KMRUN_ENOMEM, NULL, "km_time: out of memory");
  km_timer_gpu gpu;
  km_timer_gpu_init(&gpu);
  time_work w = {fn, ud, KMRUN_OK};
  km_timer_work work = {time_call, NULL, NULL, &w, 0, 0, 0};
  km_timer_result r;
  int rc = km_timer_run(km_timer_gpu_ops(0), &gpu, &p, &work, buf, &r);
  km_timer_gpu_release(&gpu);
  if (rc == KM_TIMER_EWORK) st = w.st;
  else if (rc == KM_TIMER_EDEV) st = cuda_fail((CUresult)r.err, r.what);
  else if (rc == KM_TIMER_ETAMPERED)
    st = fail(KMRUN_ETAMPERED, "GATE_TAMPERED", "km_time: the gate's page was written by something other than the host "
              "(%s; found at %s); it is put back, and this timing is void", km_gate_what(r.gate_tamper_what), r.what);
  else if (rc != KM_TIMER_OK) st = fail(KMRUN_EINVAL, NULL, "km_time: bad options");
  else {
    memset(out, 0, sizeof *out);
    out->median = r.median;
    out->mean = r.mean;
    out->min = r.min;
    out->max = r.max;
    out->p25 = r.p25;
    out->p75 = r.p75;
    out->rel_noise = r.rel_noise;
    out->total_ms = r.total_ms;
    out->n = r.n;
  }
  free(buf);
  return st;
}

km_status km_time_launch(km_rt *h, km_kern *kh, const km_launch_cfg *cfg, void **args, const km_time_opts *opts,
                         km_time_result *out) {
  GET(k, kern_obj, kh, H_KERN, "km_time_launch");
  if (!cfg) return fail(KMRUN_EINVAL, NULL, "km_time_launch: cfg is NULL");
  one_launch l = {k->fn, k->name, k->nparams, cfg, args};
  return km_time(h, launch_work, &l, opts, out);
}

/* ==== trajectory store ==== */

typedef struct { km_store *s; int64_t run_id; int has_run; } traj_obj;

static km_status store_fail(km_store *s, const char *fn) {
  return fail(KMRUN_ESTORE, s ? km_store_errcode(s) : "STORE", "%s: %s", fn, s ? km_store_errmsg(s) : "out of memory");
}

km_status km_traj_open(const char *path, int readonly, km_traj **out) {
  if (!out || !path) return fail(KMRUN_EINVAL, NULL, "km_traj_open: path and out are required");
  *out = NULL;
  traj_obj *t = calloc(1, sizeof *t);
  if (!t) return fail(KMRUN_ENOMEM, NULL, "km_traj_open: out of memory");
  if (km_store_open(path, readonly ? KM_STORE_READONLY : 0, &t->s)) {
    km_status st = store_fail(t->s, "km_traj_open");
    km_store_close(t->s);
    free(t);
    return st;
  }
  if (!(*out = reg_add(H_TRAJ, t, 0))) {
    km_store_close(t->s);
    free(t);
    return fail(KMRUN_ENOMEM, NULL, "km_traj_open: out of memory");
  }
  return KMRUN_OK;
}

km_status km_traj_close(km_traj *h) {
  traj_obj *t = reg_take(h, H_TRAJ);
  if (!t) return bad_handle(h, H_TRAJ, "km_traj_close");
  if (t->has_run) km_store_finish_run(t->s, t->run_id, "finished");
  km_store_close(t->s);
  free(t);
  return KMRUN_OK;
}

km_status km_traj_begin(km_traj *h, const char *task, const char *strategy, const char *model, int64_t *episode) {
  GET(t, traj_obj, h, H_TRAJ, "km_traj_begin");
  if (!episode) return fail(KMRUN_EINVAL, NULL, "km_traj_begin: episode is NULL");
  if (!t->has_run) {
    if (km_store_begin_run(t->s, "embed", NULL, NULL, &t->run_id)) return store_fail(t->s, "km_traj_begin");
    t->has_run = 1;
  }
  km_store_episode_info info;
  memset(&info, 0, sizeof info);
  info.task = task;
  info.strategy = strategy;
  info.model = model;
  if (km_store_begin_episode(t->s, t->run_id, &info, episode)) return store_fail(t->s, "km_traj_begin");
  return KMRUN_OK;
}

km_status km_traj_append(km_traj *h, int64_t episode, const char *kind, const char *payload_json, int64_t *seq) {
  GET(t, traj_obj, h, H_TRAJ, "km_traj_append");
  if (!kind) return fail(KMRUN_EINVAL, NULL, "km_traj_append: kind is NULL");
  int64_t s = 0;
  if (km_store_append(t->s, episode, kind, payload_json ? payload_json : "null", -1, -1, &s))
    return store_fail(t->s, "km_traj_append");
  if (seq) *seq = s;
  return KMRUN_OK;
}

km_status km_traj_finish(km_traj *h, int64_t episode, const char *status, const char *final_json) {
  GET(t, traj_obj, h, H_TRAJ, "km_traj_finish");
  if (!status) return fail(KMRUN_EINVAL, NULL, "km_traj_finish: status is NULL");
  if (km_store_finish_episode(t->s, episode, status, final_json, NULL)) return store_fail(t->s, "km_traj_finish");
  return KMRUN_OK;
}

km_status km_traj_steps(km_traj *h, int64_t episode, km_step_fn fn, void *ud) {
  GET(t, traj_obj, h, H_TRAJ, "km_traj_steps");
  if (!fn) return fail(KMRUN_EINVAL, NULL, "km_traj_steps: fn is NULL");
  km_store_episode ep;
  if (km_store_get_episode(t->s, episode, &ep))
    return fail(KMRUN_ENOTFOUND, "NOT_FOUND", "km_traj_steps: no episode %lld", (long long)episode);
  if (km_store_steps_query(t->s, episode)) return store_fail(t->s, "km_traj_steps");
  km_store_step step;
  int rc;
  while ((rc = km_store_steps_next(t->s, &step)) == 1)
    if (fn(ud, step.seq, step.kind, step.payload_json)) break;
  if (rc < 0) return store_fail(t->s, "km_traj_steps");
  return KMRUN_OK;
}

/* ==== Lua: scripts and strategies as kmrun runs them ==== */

int luaopen_km(lua_State *L); /* km_lua_module.c */

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  int st = lua_pcall(L, narg, nres, base);
  lua_remove(L, base);
  return st;
}

km_status km_run_script(const char *path, int argc, const char *const *argv, int *exit_status) {
  if (!path || (argc > 0 && !argv) || argc < 0) return fail(KMRUN_EINVAL, NULL, "km_run_script: path and argv are required");
  if (exit_status) *exit_status = 1;
  char libdir[PATH_MAX], exe[PATH_MAX];
  km_api_find_paths(libdir, sizeof libdir, exe, sizeof exe);
  lua_State *L = luaL_newstate();
  if (!L) return fail(KMRUN_ENOMEM, NULL, "km_run_script: cannot create a Lua state");
  luaL_openlibs(L);
  km_api_preload(L, luaopen_km);
  km_api_tmpname(L);
  /* package.path: KM_PATH's folders, then the library; km_libdir and km_exe for workers */
  lua_getglobal(L, "package");
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  km_api_add_path(&b, libdir);
  luaL_pushresult(&b);
  lua_setfield(L, -2, "path");
  lua_pushstring(L, libdir);
  lua_setfield(L, -2, "km_libdir");
  lua_pushstring(L, exe);
  lua_setfield(L, -2, "km_exe");
  lua_pop(L, 1);
  /* arg = { [0] = path, ... } */
  lua_createtable(L, argc, 1);
  lua_pushstring(L, path);
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i] ? argv[i] : "");
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  km_status st = KMRUN_OK;
  int code = 0;
  int ls = luaL_loadfile(L, path), not_loaded = ls != LUA_OK;
  if (ls == LUA_OK) {
    luaL_checkstack(L, argc + 3, "too many arguments");
    for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i] ? argv[i] : "");
    ls = docall(L, argc, 1);
  }
  if (ls == LUA_OK && lua_isfunction(L, -1)) { /* a strategy: km.run.runner runs it over the tasks */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "km.run.runner");
    ls = docall(L, 1, 1);
    if (ls == LUA_OK) {
      lua_getfield(L, -1, "main"); /* [fn, runner, main] */
      lua_pushvalue(L, -3);
      lua_pushstring(L, path);
      lua_getglobal(L, "arg");
      ls = docall(L, 3, 1);
    }
  }
  if (ls != LUA_OK) {
    st = fail(KMRUN_ELUA, "LUA_ERROR", "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)");
    code = not_loaded ? 2 : 1; /* as kmrun's: a file that does not load is 2 */
  } else if (lua_isinteger(L, -1)) code = (int)lua_tointeger(L, -1);
  else if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) code = 1;
  lua_close(L);
  if (exit_status) *exit_status = code;
  return st;
}
