/* km_cuda.c — `require "km.cuda"`: the CUDA driver, loaded at run time.
 *
 * The driver itself — libcuda.so.1 opened with dlopen, every entry point from
 * cuGetProcAddress, the one process-wide context (the primary context of the device chosen
 * by use(i) or KM_DEVICE, default 0), the stream launches go to — is km_driver.c's, in plain
 * C; this file is its Lua binding, so kmrun starts on machines with no driver and
 * available() says why.
 *
 * How a module is loaded, a kernel found and described and a launch issued is km_kernel.c's,
 * shared with the C API; this file turns Lua values into the parameter array and back.
 *
 * Ownership: a km.Module owns its CUmodule; a km.Function pins its Module (user value 1)
 * and holds only a borrowed CUfunction; km.Stream, km.Event and km.Graph own their
 * handles. All release through one idempotent function each (__gc, __close, :free()). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_cuda.h"
#include "km_buffer.h"
#include "km_util.h"
#include "km_devinfo.h"
#include "km_dtype.h"
#include "km_kernel.h"

#define KM_MODULE_MT "km.Module"
#define KM_FUNCTION_MT "km.Function"
#define KM_STREAM_MT "km.Stream"
#define KM_EVENT_MT "km.Event"
#define KM_GRAPH_MT "km.Graph"
#define KM_SCALAR_MT "km.Scalar"

/* ==== module-level functions ==== */

static int l_available(lua_State *L) {
  const char *why = NULL;
  if (km_cuda_get(&why)) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_pushstring(L, why);
  return 2;
}

static int l_use(lua_State *L) {
  int dev = (int)luaL_checkinteger(L, 1);
  if (km_cuda_loaded() && dev != km_cuda_device_index())
    return luaL_error(L, "km.cuda.use(%d): device %d is already in use in this process; "
                         "choose the device before the first CUDA call (or set KM_DEVICE)",
                      dev, km_cuda_device_index());
  const char *why = NULL;
  if (!km_cuda_use(dev, &why)) return km_fail(L, "CUDA_UNAVAILABLE", "%s", why);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_driver_version(lua_State *L) {
  km_cuda_check(L);
  int v = 0;
  km_cu->cuDriverGetVersion(&v);
  lua_pushfstring(L, "%d.%d", v / 1000, v % 1000 / 10);
  return 1;
}

static int l_device_count(lua_State *L) {
  if (!km_cuda_get(NULL)) {
    lua_pushinteger(L, 0);
    return 1;
  }
  int n = 0;
  km_cu->cuDeviceGetCount(&n);
  lua_pushinteger(L, n);
  return 1;
}

static void set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

/* cuda.device([i]) -> properties of device i (default: the one in use), km_devinfo_read's. */
static int l_device(lua_State *L) {
  km_cuda_check(L);
  int idx = (int)luaL_optinteger(L, 1, km_cuda_device_index());
  CUdevice d;
  CUresult r = km_cu->cuDeviceGet(&d, idx);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "cuDeviceGet");
  km_devinfo di;
  km_devinfo_read(d, &di);
  lua_createtable(L, 0, 24);
  lua_pushstring(L, di.pub.name);
  lua_setfield(L, -2, "name");
  set_int(L, "index", idx);
  set_int(L, "cc_major", di.pub.cc_major);
  set_int(L, "cc_minor", di.pub.cc_minor);
  lua_pushstring(L, di.pub.arch);
  lua_setfield(L, -2, "arch");
  set_int(L, "sm_count", di.pub.sm_count);
  set_int(L, "total_mem", (lua_Integer)di.pub.total_mem);
#define SET(field, attr, div) set_int(L, #field, di.field);
  KM_DEVINFO_ATTRS(SET)
#undef SET
  lua_pushstring(L, di.pub.uuid);
  lua_setfield(L, -2, "uuid");
  lua_pushfstring(L, "%d.%d", di.pub.driver_version / 1000, di.pub.driver_version % 1000 / 10);
  lua_setfield(L, -2, "driver_version");
  return 1;
}

static int l_mem_info(lua_State *L) {
  km_cuda_check(L);
  size_t fr = 0, tot = 0;
  CUresult r = km_cu->cuMemGetInfo(&fr, &tot);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "cuMemGetInfo");
  lua_pushinteger(L, (lua_Integer)fr);
  lua_pushinteger(L, (lua_Integer)tot);
  return 2;
}

static int l_synchronize(lua_State *L) {
  km_cuda_check(L);
  CUresult r = km_cu->cuCtxSynchronize();
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "synchronize");
  lua_pushboolean(L, 1);
  return 1;
}

/* ==== modules and functions ==== */

struct km_module_s { CUmodule mod; };

typedef struct km_module_s km_module;

typedef struct {
  CUfunction fn;
  km_module *owner;      /* pinned through user value 1, so this pointer stays valid */
  int nparams;
  size_t argbytes;       /* size of the packed argument buffer */
  size_t *offset, *size; /* per parameter; point into the trailing storage */
  char *kind;            /* per parameter: a KIND_* code */
  char name[128];
  /* storage for offset[], size[], kind[] follows */
} km_function;

enum { KIND_UNKNOWN, KIND_PTR, KIND_F32, KIND_F64, KIND_F16, KIND_BF16, KIND_I8, KIND_U8,
       KIND_I16, KIND_U16, KIND_I32, KIND_U32, KIND_I64, KIND_U64 };
static const char *const kind_names[] = {"unknown", "ptr", "f32", "f64", "f16", "bf16", "i8",
                                         "u8", "i16", "u16", "i32", "u32", "i64", "u64", NULL};
static const unsigned char kind_size[] = {0, 8, 4, 8, 2, 2, 1, 1, 2, 2, 4, 4, 8, 8};

static km_module *module_check(lua_State *L, int idx) {
  km_module *m = luaL_checkudata(L, idx, KM_MODULE_MT);
  if (!m->mod) luaL_error(L, "attempt to use a freed km.Module");
  return m;
}

static int module_release(lua_State *L) {
  km_module *m = luaL_checkudata(L, 1, KM_MODULE_MT);
  km_kernel_unload(&m->mod);
  return 0;
}

/* nil, msg, "CUDA_ERROR_X" for a failure km_kernel.c has worded. */
static int kernel_fail(lua_State *L, CUresult r, const char *msg) {
  return km_fail(L, km_cuda_errname(r), "%s", msg);
}

/* cuda.load(program_or_cubin) -> km.Module | nil, msg, code.
 * A program table from km.nvrtc carries `kernels` (parsed signatures) that launches use
 * to marshal numbers at the declared type. */
static int l_load(lua_State *L) {
  km_cuda_check(L);
  size_t len = 0;
  const char *image;
  int has_sigs = 0;
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_getfield(L, 1, "cubin");
    if (lua_type(L, -1) != LUA_TSTRING) lua_pop(L, 1), lua_getfield(L, 1, "ptx");
    image = lua_tolstring(L, -1, &len);
    if (!image) return luaL_argerror(L, 1, "program has no cubin or ptx");
    lua_getfield(L, 1, "kernels");
    has_sigs = lua_istable(L, -1);
    lua_pop(L, 1);
  } else {
    image = luaL_checklstring(L, 1, &len);
  }
  km_module *m = lua_newuserdatauv(L, sizeof *m, 1); /* [.., ud] */
  m->mod = NULL;
  luaL_setmetatable(L, KM_MODULE_MT);
  if (has_sigs) {
    lua_getfield(L, 1, "kernels");
    lua_setiuservalue(L, -2, 1);
  }
  /* cuModuleLoadData wants a NUL-terminated image for PTX; Lua strings are. */
  char msg[KM_KERNEL_MSG];
  CUresult r = km_kernel_load(image, &m->mod, msg, sizeof msg);
  if (r != CUDA_SUCCESS) return kernel_fail(L, r, msg);
  return 1;
}

static int kind_from_name(const char *s) {
  for (int i = 0; kind_names[i]; i++)
    if (!strcmp(s, kind_names[i])) return i;
  return KIND_UNKNOWN;
}

/* module:get(name) -> km.Function | nil, msg, "CUDA_ERROR_NOT_FOUND" */
static int module_get(lua_State *L) {
  km_module *m = module_check(L, 1);
  const char *name = luaL_checkstring(L, 2);
  CUfunction fn;
  int n = 0;
  size_t argbytes = 0;
  char msg[KM_KERNEL_MSG];
  CUresult r = km_kernel_get(m->mod, name, &fn, &n, &argbytes, msg, sizeof msg);
  if (r != CUDA_SUCCESS) return kernel_fail(L, r, msg);
  km_function *f = lua_newuserdatauv(L, sizeof *f + (size_t)n * (2 * sizeof(size_t) + 1), 2);
  memset(f, 0, sizeof *f);
  luaL_setmetatable(L, KM_FUNCTION_MT);
  f->fn = fn;
  f->owner = m;
  f->nparams = n;
  f->argbytes = argbytes;
  f->offset = (size_t *)(f + 1);
  f->size = f->offset + n;
  f->kind = (char *)(f->size + n);
  snprintf(f->name, sizeof f->name, "%s", name);
  km_kernel_layout(fn, n, f->offset, f->size);
  for (int i = 0; i < n; i++) f->kind[i] = KIND_UNKNOWN;
  /* uservalue 1: the module (keeps the CUmodule alive); 2: the signature, if known */
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  if (lua_getiuservalue(L, 1, 1) == LUA_TTABLE && lua_getfield(L, -1, name) == LUA_TTABLE &&
      lua_getfield(L, -1, "params") == LUA_TTABLE) {
    /* [.., f, kernels, sig, params] */
    if ((int)lua_rawlen(L, -1) == n) {
      for (int i = 0; i < n; i++) {
        lua_rawgeti(L, -1, i + 1);
        if (lua_getfield(L, -1, "kind") == LUA_TSTRING) {
          int k = kind_from_name(lua_tostring(L, -1));
          /* trust the parsed type only when its size agrees with the driver's */
          if (k != KIND_UNKNOWN && kind_size[k] == f->size[i]) f->kind[i] = (char)k;
        }
        lua_pop(L, 2);
      }
    }
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -5, 2);
  }
  lua_settop(L, 3);
  return 1;
}

static km_function *function_check(lua_State *L, int idx) {
  km_function *f = luaL_checkudata(L, idx, KM_FUNCTION_MT);
  if (!f->owner->mod) luaL_error(L, "attempt to use a function of a freed km.Module");
  return f;
}

/* The declared name and type of parameter i, for messages: "'y' (float *)" or "#2". */
static const char *param_desc(lua_State *L, int fidx, km_function *f, int i) {
  if (lua_getiuservalue(L, fidx, 2) == LUA_TTABLE && lua_getfield(L, -1, "params") == LUA_TTABLE &&
      lua_rawgeti(L, -1, i + 1) == LUA_TTABLE) {
    lua_getfield(L, -1, "name");
    lua_getfield(L, -2, "type");
    const char *s = lua_pushfstring(L, "'%s' (%s)", luaL_optstring(L, -2, "?"), luaL_optstring(L, -1, "?"));
    lua_replace(L, -6);
    lua_pop(L, 4);
    return s;
  }
  lua_pop(L, 3);
  (void)f;
  return lua_pushfstring(L, "#%d (%d bytes)", i + 1, (int)f->size[i]);
}

static int function_attributes(lua_State *L) {
  km_function *f = function_check(L, 1);
  static const struct { const char *k; CUfunction_attribute a; } attrs[] = {
      {"registers", CU_FUNC_ATTRIBUTE_NUM_REGS},
      {"shared_static", CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES},
      {"local_bytes", CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES},
      {"const_bytes", CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES},
      {"max_threads", CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {"max_dynamic_shared", CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES},
      {"ptx_version", CU_FUNC_ATTRIBUTE_PTX_VERSION},
      {"binary_version", CU_FUNC_ATTRIBUTE_BINARY_VERSION},
  };
  lua_createtable(L, 0, 10);
  for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++) {
    int v = 0;
    km_cu->cuFuncGetAttribute(&v, attrs[i].a, f->fn);
    set_int(L, attrs[i].k, v);
  }
  set_int(L, "nparams", f->nparams);
  lua_pushstring(L, f->name);
  lua_setfield(L, -2, "name");
  lua_createtable(L, f->nparams, 0);
  for (int i = 0; i < f->nparams; i++) {
    lua_createtable(L, 0, 3);
    set_int(L, "offset", (lua_Integer)f->offset[i]);
    set_int(L, "size", (lua_Integer)f->size[i]);
    lua_pushstring(L, kind_names[(int)f->kind[i]]);
    lua_setfield(L, -2, "kind");
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "params");
  return 1;
}

/* fn:occupancy(block [, dynamic_shared]) -> active blocks per SM, fraction of max warps */
static int function_occupancy(lua_State *L) {
  km_function *f = function_check(L, 1);
  int block = (int)luaL_checkinteger(L, 2);
  size_t dyn = (size_t)luaL_optinteger(L, 3, 0);
  int blocks = 0;
  CUresult r = km_cu->cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f->fn, block, dyn);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "occupancy");
  int maxthreads = km_devinfo_attr(km_cuda_device(), CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  lua_pushinteger(L, blocks);
  lua_pushnumber(L, maxthreads ? (double)blocks * block / maxthreads : 0.0);
  return 2;
}

static int function_set_max_dynamic_shared(lua_State *L) {
  km_function *f = function_check(L, 1);
  int bytes = (int)luaL_checkinteger(L, 2);
  CUresult r = km_cu->cuFuncSetAttribute(f->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "setting max dynamic shared memory");
  lua_settop(L, 1);
  return 1;
}

/* ==== typed scalars: cuda.i32(5), cuda.f32(0.5), ... for kernels without a signature ==== */

typedef struct {
  int kind;
  union { double f; long long i; unsigned long long u; } v;
} km_scalar;

static int make_scalar(lua_State *L, int kind) {
  km_scalar *s = lua_newuserdatauv(L, sizeof *s, 0);
  s->kind = kind;
  if (kind == KIND_F32 || kind == KIND_F64 || kind == KIND_F16 || kind == KIND_BF16)
    s->v.f = luaL_checknumber(L, 1);
  else if (lua_isinteger(L, 1)) s->v.i = lua_tointeger(L, 1);
  else {
    lua_Number x = luaL_checknumber(L, 1);
    if (x != floor(x)) return luaL_argerror(L, 1, "an integer type needs an integral value");
    s->v.i = (long long)x;
  }
  luaL_setmetatable(L, KM_SCALAR_MT);
  return 1;
}

#define SCALAR_CTOR(k, K) static int l_##k(lua_State *L) { return make_scalar(L, KIND_##K); }
SCALAR_CTOR(f32, F32) SCALAR_CTOR(f64, F64) SCALAR_CTOR(f16, F16) SCALAR_CTOR(bf16, BF16)
SCALAR_CTOR(i8, I8) SCALAR_CTOR(u8, U8) SCALAR_CTOR(i16, I16) SCALAR_CTOR(u16, U16)
SCALAR_CTOR(i32, I32) SCALAR_CTOR(u32, U32) SCALAR_CTOR(i64, I64) SCALAR_CTOR(u64, U64)
#undef SCALAR_CTOR

/* Writes a value of `kind` into dst (size bytes). Returns NULL or an error description. */
static const char *put_number(void *dst, size_t size, int kind, int is_int, long long iv, double fv) {
  if (kind_size[kind] != size) return "declared type and parameter size disagree";
  switch (kind) {
  case KIND_F32: { float x = (float)(is_int ? (double)iv : fv); memcpy(dst, &x, 4); return NULL; }
  case KIND_F64: { double x = is_int ? (double)iv : fv; memcpy(dst, &x, 8); return NULL; }
  case KIND_F16: { uint16_t x = km_double_to_half(is_int ? (double)iv : fv); memcpy(dst, &x, 2); return NULL; }
  case KIND_BF16: { uint16_t x = km_double_to_bf16(is_int ? (double)iv : fv); memcpy(dst, &x, 2); return NULL; }
  default: break;
  }
  if (!is_int) {
    if (fv != floor(fv) || fabs(fv) > 9.2e18) return "expected an integer, got a non-integral number";
    iv = (long long)fv;
  }
  switch (kind) {
  case KIND_I8: case KIND_U8: {
    if (iv < (kind == KIND_I8 ? -128 : 0) || iv > (kind == KIND_I8 ? 127 : 255)) return "integer out of range for an 8-bit parameter";
    unsigned char x = (unsigned char)iv; memcpy(dst, &x, 1); return NULL; }
  case KIND_I16: case KIND_U16: {
    if (iv < (kind == KIND_I16 ? -32768 : 0) || iv > (kind == KIND_I16 ? 32767 : 65535)) return "integer out of range for a 16-bit parameter";
    uint16_t x = (uint16_t)iv; memcpy(dst, &x, 2); return NULL; }
  case KIND_I32: {
    if (iv < INT32_MIN || iv > INT32_MAX) return "integer out of range for a 32-bit int parameter";
    int32_t x = (int32_t)iv; memcpy(dst, &x, 4); return NULL; }
  case KIND_U32: {
    if (iv < 0 || iv > (long long)UINT32_MAX) return "integer out of range for a 32-bit unsigned parameter";
    uint32_t x = (uint32_t)iv; memcpy(dst, &x, 4); return NULL; }
  case KIND_I64: case KIND_U64: case KIND_PTR: memcpy(dst, &iv, 8); return NULL;
  }
  return "unsupported parameter type";
}

/* ==== launch ==== */

/* A launch configuration is km_kernel.h's km_kernel_cfg; here it is read from a Lua table. */
static void read_dim3(lua_State *L, int cfg, const char *key, unsigned out[3], int required) {
  out[0] = out[1] = out[2] = 1;
  int t = lua_getfield(L, cfg, key);
  if (t == LUA_TNUMBER) {
    lua_Integer v = lua_tointeger(L, -1);
    if (v < 1 || v > 0x7fffffff) luaL_error(L, "launch: %s must be a positive integer, got %s", key, lua_tostring(L, -1));
    out[0] = (unsigned)v;
  } else if (t == LUA_TTABLE) {
    for (int i = 0; i < 3; i++) {
      if (lua_rawgeti(L, -1, i + 1) != LUA_TNIL) {
        lua_Integer v = lua_tointeger(L, -1);
        if (v < 1 || !lua_isinteger(L, -1)) luaL_error(L, "launch: %s[%d] must be a positive integer", key, i + 1);
        out[i] = (unsigned)v;
      }
      lua_pop(L, 1);
    }
  } else if (t != LUA_TNIL || required) {
    luaL_error(L, "launch: '%s' must be a number or {x, y, z}, got %s", key, luaL_typename(L, -1));
  }
  lua_pop(L, 1);
}

static void read_cfg(lua_State *L, int cfg, km_kernel_cfg *c) {
  luaL_checktype(L, cfg, LUA_TTABLE);
  read_dim3(L, cfg, "grid", c->grid, 1);
  read_dim3(L, cfg, "block", c->block, 1);
  c->shared = (unsigned)km_optfield_int(L, cfg, "shared", 0);
  lua_getfield(L, cfg, "stream");
  c->stream = lua_isnil(L, -1) ? km_cuda_stream() : km_stream_opt(L, lua_gettop(L));
  lua_pop(L, 1);
}

/* Packs the Lua arguments at [first, first+nargs) into the kernel's parameter buffer and
 * launches through km_kernel_launch, one pointer per parameter into that buffer. Raises on
 * misuse (wrong count or kind, naming the parameter); returns true or nil, msg, code for
 * CUDA failures. */
/* Raises "kernel 'k' takes 3 arguments (x, y, n), got 2", the names from the signature. */
static int arity_error(lua_State *L, int fidx, km_function *f, int nargs) {
  if (lua_getiuservalue(L, fidx, 2) == LUA_TTABLE && lua_getfield(L, -1, "params") == LUA_TTABLE) {
    int tbl = lua_gettop(L), n = (int)lua_rawlen(L, tbl);
    lua_pushliteral(L, " (");
    for (int i = 1; i <= n; i++) {
      lua_rawgeti(L, tbl, i);
      lua_getfield(L, -1, "name");
      lua_remove(L, -2);
      if (!lua_isstring(L, -1)) { lua_pop(L, 1); lua_pushliteral(L, "?"); }
      if (i < n) lua_pushliteral(L, ", ");
    }
    lua_pushliteral(L, ")");
    lua_concat(L, lua_gettop(L) - tbl);
  } else lua_pushliteral(L, "");
  const char *names = lua_tostring(L, -1);
  return luaL_error(L, "kernel '%s' takes %d argument%s%s, got %d", f->name, f->nparams,
                    f->nparams == 1 ? "" : "s", names, nargs);
}

/* A userdata argument at a (a buffer's address, or a typed scalar) into dst, a parameter of
 * sz bytes declared as `kind`. -> NULL, or what is wrong. */
static const char *pack_userdata(lua_State *L, int a, void *dst, size_t sz, int kind) {
  size_t bytes;
  CUdeviceptr p = km_buffer_ptr(L, a, &bytes);
  km_scalar *s;
  if (p) {
    if (sz != 8 || (kind != KIND_PTR && kind != KIND_UNKNOWN)) return "a buffer was passed where the kernel takes a non-pointer";
    memcpy(dst, &p, 8);
    return NULL;
  }
  if ((s = luaL_testudata(L, a, KM_SCALAR_MT))) {
    int is_int = !(s->kind == KIND_F32 || s->kind == KIND_F64 || s->kind == KIND_F16 || s->kind == KIND_BF16);
    if (kind != KIND_UNKNOWN && kind != s->kind) return lua_pushfstring(L, "a %s value was passed where the kernel declares %s", kind_names[s->kind], kind_names[kind]);
    return put_number(dst, sz, s->kind, is_int, s->v.i, s->v.f);
  }
  return "unsupported userdata";
}

/* A Lua number at a into dst: an address for a pointer, else a number of the declared kind
 * (without a signature, of the kind the number's subtype and the width say). */
static const char *pack_number(lua_State *L, int a, void *dst, size_t sz, int kind) {
  int is_int = lua_isinteger(L, a);
  int k = kind;
  if (k == KIND_PTR) {
    if (!is_int) return "a pointer parameter needs a buffer or an integer address";
    long long v = lua_tointeger(L, a);
    memcpy(dst, &v, 8);
    return NULL;
  }
  if (k == KIND_UNKNOWN) { /* no signature: the Lua number's subtype and the width decide */
    if (sz == 4) k = is_int ? KIND_I32 : KIND_F32;
    else if (sz == 8) k = is_int ? KIND_I64 : KIND_F64;
    else if (sz == 1 && is_int) k = KIND_I8;
    else return "cannot infer this parameter's type; wrap the value (cuda.f16(x), cuda.i16(x), ...)";
  }
  return put_number(dst, sz, k, is_int, is_int ? lua_tointeger(L, a) : 0, lua_tonumber(L, a));
}

/* Argument a into dst, parameter i of f. -> NULL, or what is wrong. */
static const char *pack_arg(lua_State *L, int a, km_function *f, int i, void *dst) {
  size_t sz = f->size[i];
  int kind = f->kind[i];
  int t = lua_type(L, a);
  if (t == LUA_TUSERDATA) return pack_userdata(L, a, dst, sz, kind);
  if (t == LUA_TNUMBER) return pack_number(L, a, dst, sz, kind);
  if (t == LUA_TBOOLEAN) {
    if (sz != 1 && !(kind == KIND_I32 || kind == KIND_U32 || (kind == KIND_UNKNOWN && sz == 4))) return "a boolean needs a 1-byte (bool) or int parameter";
    int v = lua_toboolean(L, a);
    memcpy(dst, &v, sz == 1 ? 1 : 4);
    return NULL;
  }
  if (t == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, a, &len);
    if (len != sz) return lua_pushfstring(L, "a %d-byte string was passed for a %d-byte parameter", (int)len, (int)sz);
    memcpy(dst, s, sz);
    return NULL;
  }
  if (t == LUA_TNIL && kind == KIND_PTR) {
    memset(dst, 0, 8); /* nil is the null pointer */
    return NULL;
  }
  return lua_pushfstring(L, "got %s", luaL_typename(L, a));
}

static int do_launch(lua_State *L, int fidx, km_function *f, const km_kernel_cfg *c, int first, int nargs) {
  if (nargs != f->nparams) return arity_error(L, fidx, f, nargs);
  unsigned char stackbuf[512];
  unsigned char *buf = stackbuf;
  if (f->argbytes > sizeof stackbuf) buf = lua_newuserdatauv(L, f->argbytes, 0);
  memset(buf, 0, f->argbytes);
  void *stackargs[64];
  void **args = stackargs;
  if (nargs > 64) args = lua_newuserdatauv(L, sizeof(void *) * (size_t)nargs, 0);
  for (int i = 0; i < nargs; i++) {
    void *dst = buf + f->offset[i];
    args[i] = dst;
    const char *err = pack_arg(L, first + i, f, i, dst);
    if (err) {
      const char *pd = param_desc(L, fidx, f, i);
      return luaL_error(L, "kernel '%s', argument %d %s: %s", f->name, i + 1, pd, err);
    }
  }
  char msg[KM_KERNEL_MSG];
  CUresult r = km_kernel_launch(f->fn, f->name, nargs, c, args, msg, sizeof msg);
  if (r != CUDA_SUCCESS) return kernel_fail(L, r, msg);
  lua_pushboolean(L, 1);
  return 1;
}

/* fn:launch(cfg, args...) */
static int function_launch(lua_State *L) {
  km_function *f = function_check(L, 1);
  km_kernel_cfg c;
  read_cfg(L, 2, &c);
  return do_launch(L, 1, f, &c, 3, lua_gettop(L) - 2);
}

/* fn{grid=, block=}(args...): upvalues are the function and the config table */
static int bound_launch(lua_State *L) {
  km_function *f = function_check(L, lua_upvalueindex(1));
  km_kernel_cfg c;
  read_cfg(L, lua_upvalueindex(2), &c);
  return do_launch(L, lua_upvalueindex(1), f, &c, 1, lua_gettop(L));
}

static int function_call(lua_State *L) {
  function_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  lua_pushcclosure(L, bound_launch, 2);
  return 1;
}

static int function_tostring(lua_State *L) {
  km_function *f = luaL_checkudata(L, 1, KM_FUNCTION_MT);
  lua_pushfstring(L, "km.Function '%s' (%d params)", f->name, f->nparams);
  return 1;
}

/* ==== streams, events, graphs ==== */

typedef struct { CUstream s; } km_stream;
typedef struct { CUevent e; } km_event;
typedef struct { CUgraph g; CUgraphExec exec; } km_graph;

CUstream km_stream_opt(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return km_cuda_stream();
  km_stream *s = luaL_checkudata(L, idx, KM_STREAM_MT);
  if (!s->s) luaL_error(L, "attempt to use a freed km.Stream");
  return s->s;
}

static int stream_release(lua_State *L) {
  km_stream *s = luaL_checkudata(L, 1, KM_STREAM_MT);
  if (s->s && km_cu) km_cu->cuStreamDestroy(s->s);
  s->s = NULL;
  return 0;
}

static int l_stream(lua_State *L) {
  km_cuda_check(L);
  km_stream *s = lua_newuserdatauv(L, sizeof *s, 0);
  s->s = NULL;
  luaL_setmetatable(L, KM_STREAM_MT);
  CUresult r = km_cu->cuStreamCreate(&s->s, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) { s->s = NULL; return km_cuda_fail(L, r, "creating a stream"); }
  return 1;
}

static int stream_synchronize(lua_State *L) {
  CUstream s = km_stream_opt(L, 1);
  CUresult r = km_cu->cuStreamSynchronize(s);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "stream synchronize");
  lua_pushboolean(L, 1);
  return 1;
}

static int stream_query(lua_State *L) {
  CUresult r = km_cu->cuStreamQuery(km_stream_opt(L, 1));
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) {
    lua_pushboolean(L, r == CUDA_SUCCESS);
    return 1;
  }
  return km_cuda_fail(L, r, "stream query");
}

static km_event *event_check(lua_State *L, int idx) {
  km_event *e = luaL_checkudata(L, idx, KM_EVENT_MT);
  if (!e->e) luaL_error(L, "attempt to use a freed km.Event");
  return e;
}

static int event_release(lua_State *L) {
  km_event *e = luaL_checkudata(L, 1, KM_EVENT_MT);
  if (e->e && km_cu) km_cu->cuEventDestroy(e->e);
  e->e = NULL;
  return 0;
}

static int l_event(lua_State *L) {
  km_cuda_check(L);
  km_event *e = lua_newuserdatauv(L, sizeof *e, 0);
  e->e = NULL;
  luaL_setmetatable(L, KM_EVENT_MT);
  CUresult r = km_cu->cuEventCreate(&e->e, CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) { e->e = NULL; return km_cuda_fail(L, r, "creating an event"); }
  return 1;
}

static int event_record(lua_State *L) {
  km_event *e = event_check(L, 1);
  CUresult r = km_cu->cuEventRecord(e->e, km_stream_opt(L, 2));
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "event record");
  lua_settop(L, 1);
  return 1;
}

static int event_synchronize(lua_State *L) {
  km_event *e = event_check(L, 1);
  CUresult r = km_cu->cuEventSynchronize(e->e);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "event synchronize");
  lua_pushboolean(L, 1);
  return 1;
}

/* start:elapsed(stop) -> milliseconds */
static int event_elapsed(lua_State *L) {
  km_event *a = event_check(L, 1), *b = event_check(L, 2);
  float ms = 0;
  CUresult r = km_cu->cuEventElapsedTime(&ms, a->e, b->e);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "event elapsed time");
  lua_pushnumber(L, ms);
  return 1;
}

static int graph_release(lua_State *L) {
  km_graph *g = luaL_checkudata(L, 1, KM_GRAPH_MT);
  if (km_cu) {
    if (g->exec) km_cu->cuGraphExecDestroy(g->exec);
    if (g->g) km_cu->cuGraphDestroy(g->g);
  }
  g->exec = NULL;
  g->g = NULL;
  return 0;
}

/* cuda.capture(fn [, stream]) -> km.Graph | nil, msg, code
 * Runs fn() with launches redirected to a capturing stream; what it enqueues becomes a
 * graph that :launch() replays. Work sent to the legacy default stream during capture
 * fails the capture (global mode), so nothing escapes it unseen. */
static int l_capture(lua_State *L) {
  km_cuda_check(L);
  luaL_checktype(L, 1, LUA_TFUNCTION);
  CUstream s;
  int own = lua_isnoneornil(L, 2);
  if (own) {
    CUresult r = km_cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "creating a capture stream");
  } else s = km_stream_opt(L, 2);
  km_graph *g = lua_newuserdatauv(L, sizeof *g, 0); /* [fn, stream?, graph] */
  g->g = NULL;
  g->exec = NULL;
  luaL_setmetatable(L, KM_GRAPH_MT);
  CUresult r = km_cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
  if (r != CUDA_SUCCESS) {
    if (own) km_cu->cuStreamDestroy(s);
    return km_cuda_fail(L, r, "begin capture");
  }
  CUstream saved = km_cuda_set_stream(s);
  lua_pushvalue(L, 1);
  int status = lua_pcall(L, 0, 0, 0);
  km_cuda_set_stream(saved);
  CUgraph graph = NULL;
  CUresult re = km_cu->cuStreamEndCapture(s, &graph);
  if (own) km_cu->cuStreamDestroy(s);
  if (status != LUA_OK) {
    if (graph) km_cu->cuGraphDestroy(graph);
    return lua_error(L); /* re-raise fn's error */
  }
  if (re != CUDA_SUCCESS) return km_cuda_fail(L, re, "capturing a graph (was work sent to another stream?)");
  g->g = graph;
  r = km_cu->cuGraphInstantiateWithFlags(&g->exec, graph, 0);
  if (r != CUDA_SUCCESS) { g->exec = NULL; return km_cuda_fail(L, r, "instantiating a graph"); }
  return 1;
}

static int graph_launch(lua_State *L) {
  km_graph *g = luaL_checkudata(L, 1, KM_GRAPH_MT);
  if (!g->exec) return luaL_error(L, "attempt to use a freed km.Graph");
  CUresult r = km_cu->cuGraphLaunch(g->exec, km_stream_opt(L, 2));
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "graph launch");
  lua_pushboolean(L, 1);
  return 1;
}

/* cuda.current_stream() -> the stream launches go to now (nil: the default stream) */
static int l_current_stream(lua_State *L) {
  lua_pushlightuserdata(L, km_cuda_stream());
  return 1;
}

/* ==== registration ==== */

int luaopen_km_cuda(lua_State *L) {
  static const luaL_Reg module_m[] = {{"get", module_get}, {"free", module_release}, {NULL, NULL}};
  static const luaL_Reg function_m[] = {{"launch", function_launch},
                                        {"attributes", function_attributes},
                                        {"occupancy", function_occupancy},
                                        {"set_max_dynamic_shared", function_set_max_dynamic_shared},
                                        {NULL, NULL}};
  static const luaL_Reg stream_m[] = {{"synchronize", stream_synchronize}, {"query", stream_query},
                                      {"free", stream_release}, {NULL, NULL}};
  static const luaL_Reg event_m[] = {{"record", event_record}, {"synchronize", event_synchronize},
                                     {"elapsed", event_elapsed}, {"free", event_release}, {NULL, NULL}};
  static const luaL_Reg graph_m[] = {{"launch", graph_launch}, {"free", graph_release}, {NULL, NULL}};
  static const luaL_Reg scalar_m[] = {{NULL, NULL}};
  km_newclass(L, KM_MODULE_MT, module_m, module_release);
  km_newclass(L, KM_FUNCTION_MT, function_m, NULL);
  luaL_getmetatable(L, KM_FUNCTION_MT);
  lua_pushcfunction(L, function_call);
  lua_setfield(L, -2, "__call");
  lua_pushcfunction(L, function_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  km_newclass(L, KM_STREAM_MT, stream_m, stream_release);
  km_newclass(L, KM_EVENT_MT, event_m, event_release);
  km_newclass(L, KM_GRAPH_MT, graph_m, graph_release);
  km_newclass(L, KM_SCALAR_MT, scalar_m, NULL);

  static const luaL_Reg fns[] = {
      {"available", l_available}, {"use", l_use}, {"driver_version", l_driver_version},
      {"device_count", l_device_count}, {"device", l_device}, {"mem_info", l_mem_info},
      {"synchronize", l_synchronize}, {"load", l_load}, {"stream", l_stream}, {"event", l_event},
      {"capture", l_capture}, {"current_stream", l_current_stream},
      {"f32", l_f32}, {"f64", l_f64}, {"f16", l_f16}, {"bf16", l_bf16}, {"i8", l_i8}, {"u8", l_u8},
      {"i16", l_i16}, {"u16", l_u16}, {"i32", l_i32}, {"u32", l_u32}, {"i64", l_i64}, {"u64", l_u64},
      {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
