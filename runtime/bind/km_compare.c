/* km_compare.c — `require "km.compare"`: allclose for device buffers (on the GPU) and for
 * host data (Lua tables, or byte strings with a dtype) in pure C. Same rule both ways
 * (km_compare_core.h).
 *
 *   compare.allclose(got, want, { atol=, rtol=, equal_nan=, dtype= })
 *     -> { ok, n, mismatches, nan, inf, max_abs, max_rel, atol, rtol,
 *          first = { index, got, want } | nil, examples = { {index, got, want}, ... } }
 *
 * Indices are 0-based flat element indices, as a kernel computes them. A mismatch is a
 * result, not an error; misuse (different dtypes or sizes) raises. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_compare_core.h"
#include "km_util.h"
#include "km_buffer.h"
#include "km_devops.h"
#include "km_dtype.h"

static void read_tol(lua_State *L, int idx, km_tol *t) {
  t->atol = km_optfield_num(L, idx, "atol", 1e-8);
  t->rtol = km_optfield_num(L, idx, "rtol", 1e-5);
  t->equal_nan = km_optfield_bool(L, idx, "equal_nan", 0);
  if (t->atol < 0 || t->rtol < 0 || isnan(t->atol) || isnan(t->rtol))
    luaL_error(L, "allclose: atol and rtol must be non-negative numbers");
}

static void push_num(lua_State *L, km_dtype dt, double v, int64_t iv) {
  if (dt == KM_I64) lua_pushinteger(L, iv);
  else if (!km_dtype_is_float(dt)) lua_pushinteger(L, (lua_Integer)v);
  else lua_pushnumber(L, v);
}

/* Element i of got/want: fetch(L, which, i, &dval, &ival). */
typedef void (*fetch_fn)(void *ctx, int which, int64_t i, double *d, int64_t *iv);

static void push_example(lua_State *L, km_dtype dt, fetch_fn fetch, void *ctx, int64_t i) {
  double g, w;
  int64_t gi = 0, wi = 0;
  fetch(ctx, 0, i, &g, &gi);
  fetch(ctx, 1, i, &w, &wi);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, i);
  lua_setfield(L, -2, "index");
  push_num(L, dt, g, gi);
  lua_setfield(L, -2, "got");
  push_num(L, dt, w, wi);
  lua_setfield(L, -2, "want");
}

static void push_result(lua_State *L, km_dtype dt, const km_cmp_result *r, const km_tol *t,
                        fetch_fn fetch, void *ctx) {
  lua_createtable(L, 0, 12);
  lua_pushboolean(L, r->ok);
  lua_setfield(L, -2, "ok");
  lua_pushinteger(L, (lua_Integer)r->n);
  lua_setfield(L, -2, "n");
  lua_pushinteger(L, (lua_Integer)r->mismatches);
  lua_setfield(L, -2, "mismatches");
  lua_pushinteger(L, (lua_Integer)r->compared);
  lua_setfield(L, -2, "compared");
  lua_pushinteger(L, (lua_Integer)r->nan_got);
  lua_setfield(L, -2, "nan");
  lua_pushinteger(L, (lua_Integer)r->inf_got);
  lua_setfield(L, -2, "inf");
  lua_pushnumber(L, r->max_abs);
  lua_setfield(L, -2, "max_abs");
  lua_pushnumber(L, r->max_rel);
  lua_setfield(L, -2, "max_rel");
  lua_pushnumber(L, t->atol);
  lua_setfield(L, -2, "atol");
  lua_pushnumber(L, t->rtol);
  lua_setfield(L, -2, "rtol");
  lua_pushstring(L, km_dtype_name(dt));
  lua_setfield(L, -2, "dtype");
  if (r->first >= 0) {
    push_example(L, dt, fetch, ctx, r->first);
    lua_setfield(L, -2, "first");
  }
  lua_createtable(L, r->n_examples, 0);
  for (int i = 0; i < r->n_examples; i++) {
    push_example(L, dt, fetch, ctx, r->examples[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "examples");
}

/* ---- host data ---- */

typedef struct { km_dtype dt; const void *a, *b; } host_ctx;

static void host_fetch(void *c, int which, int64_t i, double *d, int64_t *iv) {
  host_ctx *h = c;
  const void *base = which ? h->b : h->a;
  *d = km_dtype_get(h->dt, base, (size_t)i);
  if (h->dt == KM_I64) memcpy(iv, (const char *)base + i * 8, 8);
}

/* A Lua table of numbers as a host array of dtype dt (a string on the stack). */
static const void *table_bytes(lua_State *L, int idx, km_dtype dt, uint64_t *n) {
  *n = lua_rawlen(L, idx);
  size_t es = km_dtype_size(dt);
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, *n * es + 1);
  for (uint64_t i = 0; i < *n; i++) {
    lua_rawgeti(L, idx, (lua_Integer)i + 1);
    if (dt == KM_I64 && lua_isinteger(L, -1)) {
      int64_t v = lua_tointeger(L, -1);
      memcpy(p + i * 8, &v, 8);
    } else {
      int ok;
      double v = lua_tonumberx(L, -1, &ok);
      if (!ok) luaL_error(L, "allclose: element %I is %s, not a number", (lua_Integer)i + 1, luaL_typename(L, -1));
      km_dtype_set(dt, p, i, v);
    }
    lua_pop(L, 1);
  }
  luaL_pushresultsize(&b, *n * es);
  return lua_tostring(L, -1);
}

static int allclose_host(lua_State *L, const km_tol *tol) {
  const char *dname = km_optfield_str(L, 3, "dtype", "f64");
  int d = km_dtype_parse(dname);
  if (d < 0) return luaL_error(L, "allclose: unknown dtype '%s'", dname);
  km_dtype dt = (km_dtype)d;
  uint64_t na, nb;
  const void *a, *b;
  if (lua_type(L, 1) == LUA_TSTRING && lua_type(L, 2) == LUA_TSTRING) {
    size_t la, lb;
    a = lua_tolstring(L, 1, &la);
    b = lua_tolstring(L, 2, &lb);
    size_t es = km_dtype_size(dt);
    if (la % es || lb % es) return luaL_error(L, "allclose: byte strings are not a whole number of %s elements", dname);
    na = la / es;
    nb = lb / es;
  } else {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    a = table_bytes(L, 1, dt, &na);
    b = table_bytes(L, 2, dt, &nb);
  }
  if (na != nb) return luaL_error(L, "allclose: sizes differ (%I vs %I elements)", (lua_Integer)na, (lua_Integer)nb);
  km_cmp_result r;
  km_compare_host(dt, a, b, na, tol, &r);
  host_ctx ctx = {dt, a, b};
  push_result(L, dt, &r, tol, host_fetch, &ctx);
  return 1;
}

/* ---- device buffers ---- */

typedef struct { km_dtype dt; CUdeviceptr a, b; } dev_ctx;

static void dev_fetch(void *c, int which, int64_t i, double *d, int64_t *iv) {
  dev_ctx *h = c;
  size_t es = km_dtype_size(h->dt);
  unsigned char tmp[8] = {0};
  if (km_cu->cuMemcpyDtoH(tmp, (which ? h->b : h->a) + (CUdeviceptr)i * es, es) != CUDA_SUCCESS) {
    *d = NAN;
    *iv = 0;
    return;
  }
  *d = km_dtype_get(h->dt, tmp, 0);
  memcpy(iv, tmp, 8);
}

/* A km.Buffer at 1 and, at 2, a km.Buffer or a range of device memory of the first's dtype,
 * { ptr = address, nbytes = n } (a PyTorch reference's own output, kept by km.task.kernelbench):
 * their dtype (the same), pointers and element count; raises. */
static km_dtype dev_args(lua_State *L, CUdeviceptr *pa, CUdeviceptr *pb, uint64_t *n) {
  km_cuda_check(L);
  /* dtype and size via the buffers' own methods keeps km_buffer's struct private */
  size_t ba, bb;
  int range = lua_istable(L, 2);
  *pa = km_buffer_ptr(L, 1, &ba);
  if (range) {
    int isnum = 0, isbytes = 0;
    lua_getfield(L, 2, "ptr");
    lua_Integer ptr = lua_tointegerx(L, -1, &isnum);
    lua_getfield(L, 2, "nbytes");
    lua_Integer nbytes = lua_tointegerx(L, -1, &isbytes);
    lua_pop(L, 2);
    luaL_argcheck(L, isnum && isbytes && ptr > 0 && nbytes >= 0, 2, "a km.Buffer or a range { ptr = address, nbytes = n } expected");
    *pb = (CUdeviceptr)ptr, bb = (size_t)nbytes;
  } else {
    *pb = km_buffer_ptr(L, 2, &bb);
  }
  lua_getfield(L, 1, "dtype");
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  if (range) {
    lua_pushvalue(L, -1);
  } else {
    lua_getfield(L, 2, "dtype");
    lua_pushvalue(L, 2);
    lua_call(L, 1, 1);
  }
  if (strcmp(lua_tostring(L, -1), lua_tostring(L, -2)))
    luaL_error(L, "allclose: dtypes differ (%s vs %s)", lua_tostring(L, -2), lua_tostring(L, -1));
  km_dtype dt = (km_dtype)km_dtype_parse(lua_tostring(L, -1));
  lua_pop(L, 2);
  if (ba != bb) luaL_error(L, "allclose: sizes differ (%I vs %I bytes)", (lua_Integer)ba, (lua_Integer)bb);
  *n = ba / km_dtype_size(dt);
  km_cuda_util(L, "km_compare"); /* raises when the utility kernels cannot load */
  return dt;
}

/* poison = true counts elements still holding km.buffer's poison pattern */
static int poison_opt(lua_State *L) {
  int on = lua_getfield(L, 3, "poison") == LUA_TBOOLEAN && lua_toboolean(L, -1);
  lua_pop(L, 1);
  return on;
}

static void push_dev_result(lua_State *L, km_dtype dt, CUdeviceptr pa, CUdeviceptr pb, const km_cmp_result *res,
                            const km_tol *tol, int poison_on, uint64_t unwritten) {
  dev_ctx ctx = {dt, pa, pb};
  push_result(L, dt, res, tol, dev_fetch, &ctx);
  if (poison_on) {
    lua_pushinteger(L, (lua_Integer)unwritten);
    lua_setfield(L, -2, "unwritten");
  }
}

static int allclose_dev(lua_State *L, const km_tol *tol) {
  CUdeviceptr pa, pb;
  uint64_t n;
  km_dtype dt = dev_args(L, &pa, &pb, &n);
  int poison_on = poison_opt(L);
  km_cmp_result res;
  uint64_t unwritten = 0;
  CUresult r = km_devcompare(dt, pa, pb, n, tol, poison_on, km_cuda_stream(), &res, &unwritten);
  if (r != CUDA_SUCCESS) return km_cuda_fail(L, r, "allclose");
  push_dev_result(L, dt, pa, pb, &res, tol, poison_on, unwritten);
  return 1;
}

/* compare.enqueue(a, b, opts, ledger) -> i: allclose of two buffers enqueued with no wait, its
 * result in the ledger's slots from i (km.buffer's ledger); compare.result(a, b, opts,
 * ledger, i) -> allclose's table, once the ledger was read. b may be a range of device
 * memory, { ptr, nbytes }, of a's dtype and size. */
typedef struct {
  km_tol tol;
  CUdeviceptr pa, pb;
  uint64_t n;
  km_dtype dt;
  int poison_on;
  int sampled;
  km_lines lines;
} ledger_cmp;

/* opts.lines = { key = k, shift = s } (enqueue only): a sample of the lines, one in 2^s
 * (km_lines), drawn from k after the outputs were written; absent: every line. */
static void lines_opt(lua_State *L, int idx, ledger_cmp *c) {
  c->sampled = lua_getfield(L, idx, "lines") != LUA_TNIL;
  if (c->sampled) km_check_lines(L, -1, idx, &c->lines);
  lua_pop(L, 1);
}

/* The arguments both read: a buffer at 1, at 2 a buffer or a range of device memory
 * (dev_args), the options at 3 (nil: defaults). */
static void ledger_args(lua_State *L, int top, ledger_cmp *c) {
  lua_settop(L, top);
  luaL_checkudata(L, 1, "km.Buffer");
  if (!lua_istable(L, 2)) luaL_checkudata(L, 2, "km.Buffer");
  if (lua_isnil(L, 3)) { lua_newtable(L); lua_replace(L, 3); }
  read_tol(L, 3, &c->tol);
  c->dt = dev_args(L, &c->pa, &c->pb, &c->n);
  c->poison_on = poison_opt(L);
  lines_opt(L, 3, c);
}

static int l_enqueue(lua_State *L) {
  ledger_cmp c;
  ledger_args(L, 4, &c);
  CUdeviceptr acc = km_ledger_take(L, 4, KM_CMP_SLOTS);
  CUresult r = km_devcompare_at(c.dt, c.pa, c.pb, c.n, &c.tol, c.poison_on, km_cuda_stream(), acc,
                                c.sampled ? &c.lines : NULL);
  if (r != CUDA_SUCCESS) return km_cuda_raise(L, r, "allclose");
  return 1;
}

static int l_result(lua_State *L) {
  ledger_cmp c;
  ledger_args(L, 5, &c);
  const uint64_t *slots = km_ledger_slots(L, 4, luaL_checkinteger(L, 5), KM_CMP_SLOTS);
  km_cmp_result res;
  uint64_t unwritten = 0;
  km_devcompare_decode(slots, c.n, &res, &unwritten);
  push_dev_result(L, c.dt, c.pa, c.pb, &res, &c.tol, c.poison_on, unwritten);
  return 1;
}

static int l_allclose(lua_State *L) {
  km_tol tol;
  lua_settop(L, 3);
  if (lua_isnil(L, 3)) { lua_newtable(L); lua_replace(L, 3); }
  read_tol(L, 3, &tol);
  if (luaL_testudata(L, 1, "km.Buffer") || luaL_testudata(L, 2, "km.Buffer")) {
    if (!luaL_testudata(L, 1, "km.Buffer") || !luaL_testudata(L, 2, "km.Buffer"))
      return luaL_error(L, "allclose: compare a buffer with a buffer (copy host data into one first)");
    return allclose_dev(L, &tol);
  }
  return allclose_host(L, &tol);
}

/* compare.rel_l2(got_bytes, want_bytes, dtype) -> the norm-wise relative error of two host
 * arrays as byte strings (a buffer's to_string()): km_rel_l2_host's. */
static int l_rel_l2(lua_State *L) {
  size_t ng, nw;
  const char *g = luaL_checklstring(L, 1, &ng), *w = luaL_checklstring(L, 2, &nw);
  int d = km_dtype_parse(luaL_checkstring(L, 3));
  if (d < 0 || d == KM_I64) return luaL_argerror(L, 3, "a floating-point or small integer dtype expected");
  size_t es = km_dtype_size((km_dtype)d);
  if (ng != nw || ng % es) return luaL_error(L, "rel_l2: two arrays of the same whole number of elements expected");
  double rel;
  km_rel_l2_host((km_dtype)d, g, w, ng / es, &rel);
  lua_pushnumber(L, rel);
  return 1;
}

int luaopen_km_compare(lua_State *L) {
  static const luaL_Reg fns[] = {{"allclose", l_allclose}, {"enqueue", l_enqueue}, {"result", l_result},
                                 {"rel_l2", l_rel_l2}, {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushinteger(L, KM_CMP_SLOTS);
  lua_setfield(L, -2, "SLOTS");
  return 1;
}
