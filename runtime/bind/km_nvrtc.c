/* km_nvrtc.c — `require "km.nvrtc"`: CUDA C++ to cubin through NVRTC, with an on-disk
 * cache and the extern "C" kernel signatures the launch code marshals arguments by.
 *
 *   local nvrtc = require "km.nvrtc"
 *   local r, log, code = nvrtc.compile(src, { arch = "sm_90", defines = { BLOCK = 256 } })
 *   -- r = { cubin, ptx, log, arch, name, key, cached, confined, ms, kernels = { k = { name, params } } }
 *   nvrtc.confinement() -> "landlock" | nil, why, "UNCONFINED": NVRTC runs on a thread that
 *   -- can read only the toolkit's include tree (km_confine_core.h)
 *   local rs = nvrtc.compile_many({ { src1, opts1 }, { src2, opts2 } }, { threads = 8 })
 *   -- rs[i] = compile's table, or { error = log, code = CODE, key, ms } when it failed
 *   -- a source that includes anything but toolkit headers, kmrun's built-ins or `headers`
 *   -- fails with code "INCLUDE_REFUSED" before NVRTC runs (docs/nvrtc.md "Closed world");
 *   -- without `arch`: the arch of a CUDA context this process already holds, else sm_90
 *
 * The work is in km_nvrtc_core.c (compile, cache) and km_nvrtc_scan_core.c (kernel
 * signatures); this file only translates Lua values into a km_nvrtc_req (every string
 * stays anchored in a table on the stack while C uses it) and the km_nvrtc_out back into a
 * plain table that can be serialised to a worker process.
 * compile_many builds every request first, runs km_nvrtc_compile_c on pthreads that never
 * see the lua_State, and pushes the results after joining them. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <nvrtc.h>

#include "km.h"
#include "km_driver.h"
#include "km_nvrtc_core.h"
#include "km_nvrtc_scan_core.h"

#define KM_NVRTC_OUT_MT "km.nvrtc.Out"
#define KM_NVRTC_MANY_MT "km.nvrtc.Many" /* compile_many's boxed results */
#define KM_NVRTC_DIR_KEY "km.nvrtc.cache_dir" /* registry: set_cache_dir's override */

/* ---- building a request ---- */

/* Everything a request borrows lives in an anchor table at stack index `anchor`, so the
 * pointers stay valid whatever the opts table's metamethods do. compile and key build one
 * request from their arguments (entry = 0); compile_many builds one per list entry
 * (entry = its 1-based index), and every misuse error then names the entry. */
typedef struct reqbuild {
  km_nvrtc_req req;
  char arch[32];
  int opts;   /* stack index of the opts table, or of a nil */
  int anchor; /* stack index of the anchor table */
  int nanchored;
  int entry;
} reqbuild;

/* Raises a misuse error about rb's request. compile and key say it as before — as a bad
 * argument #2 when as_arg, else plainly; compile_many prefixes "compile_many: entry N: ". */
static int req_error(lua_State *L, const reqbuild *rb, int as_arg, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *msg = lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  if (rb->entry) return luaL_error(L, "compile_many: entry %d: %s", rb->entry, msg);
  if (as_arg) return luaL_argerror(L, rb->opts, msg);
  return luaL_error(L, "%s", msg);
}

static const char *anchor_top(lua_State *L, reqbuild *rb) {
  const char *s = lua_tostring(L, -1);
  lua_rawseti(L, rb->anchor, ++rb->nanchored); /* pops it */
  return s;
}

/* Pushes opts[field] and returns its type; LUA_TNIL leaves nothing pushed. */
static int get_opt(lua_State *L, const reqbuild *rb, const char *field) {
  if (lua_isnoneornil(L, rb->opts)) return LUA_TNIL;
  int t = lua_getfield(L, rb->opts, field);
  if (t == LUA_TNIL) lua_pop(L, 1);
  return t;
}

static const char *opt_string(lua_State *L, reqbuild *rb, const char *field) {
  int t = get_opt(L, rb, field);
  if (t == LUA_TNIL) return NULL;
  if (t != LUA_TSTRING)
    req_error(L, rb, 0, "option '%s' must be a string, got %s", field, luaL_typename(L, -1));
  return anchor_top(L, rb);
}

static int opt_bool(lua_State *L, reqbuild *rb, const char *field, int def) {
  int t = get_opt(L, rb, field);
  if (t == LUA_TNIL) return def;
  if (t != LUA_TBOOLEAN)
    req_error(L, rb, 0, "option '%s' must be a boolean, got %s", field, luaL_typename(L, -1));
  int v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

static const char *const known_opts[] = {"arch", "options", "defines", "headers", "name",
                                         "ptx",  "cache",   "std",     NULL};

static void check_keys(lua_State *L, reqbuild *rb) {
  if (lua_isnoneornil(L, rb->opts)) return;
  lua_pushnil(L);
  while (lua_next(L, rb->opts)) {
    lua_pop(L, 1); /* [key] */
    int ok = 0;
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *k = lua_tostring(L, -1);
      for (int i = 0; known_opts[i] && !ok; i++) ok = !strcmp(k, known_opts[i]);
      if (!ok) req_error(L, rb, 1, "unknown option '%s'", k);
    } else {
      req_error(L, rb, 1, "unknown option (a %s key)", luaL_typename(L, -1));
    }
  }
}

/* The cache folder: set_cache_dir's override, else the environment's; "" when none. */
static void resolve_cache_dir(lua_State *L, char *buf, size_t n) {
  buf[0] = '\0';
  if (lua_getfield(L, LUA_REGISTRYINDEX, KM_NVRTC_DIR_KEY) == LUA_TSTRING)
    snprintf(buf, n, "%s", lua_tostring(L, -1));
  else if (km_nvrtc_default_cache_dir(buf, n))
    buf[0] = '\0';
  lua_pop(L, 1);
}

static void build_options(lua_State *L, reqbuild *rb) {
  if (get_opt(L, rb, "options") == LUA_TNIL) return;
  if (!lua_istable(L, -1))
    req_error(L, rb, 0, "option 'options' must be an array of strings, got %s", luaL_typename(L, -1));
  int tab = lua_gettop(L);
  lua_Integer n = (lua_Integer)lua_rawlen(L, tab);
  const char **v = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *v, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, tab, i) != LUA_TSTRING)
      req_error(L, rb, 0, "option 'options[%d]' must be a string, got %s", (int)i, luaL_typename(L, -1));
    v[i - 1] = anchor_top(L, rb);
  }
  anchor_top(L, rb); /* the array itself */
  lua_pop(L, 1);     /* the options table */
  rb->req.options = v;
  rb->req.noptions = (size_t)n;
}

static int is_c_identifier(const char *s) {
  if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return 0;
  for (; *s; s++)
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
      return 0;
  return 1;
}

/* defines = { NAME = value }: a string or number gives -DNAME=value, true gives -DNAME,
 * false leaves NAME undefined. The core sorts them, so table order does not matter. */
static void build_defines(lua_State *L, reqbuild *rb) {
  if (get_opt(L, rb, "defines") == LUA_TNIL) return;
  if (!lua_istable(L, -1))
    req_error(L, rb, 0, "option 'defines' must be a table, got %s", luaL_typename(L, -1));
  int tab = lua_gettop(L);
  size_t n = 0;
  for (lua_pushnil(L); lua_next(L, tab); lua_pop(L, 1)) n++;
  km_nvrtc_define *v = lua_newuserdatauv(L, (n ? n : 1) * sizeof *v, 0);
  size_t k = 0;
  for (lua_pushnil(L); lua_next(L, tab); lua_pop(L, 1)) { /* [.., key, value] */
    if (lua_type(L, -2) != LUA_TSTRING || !is_c_identifier(lua_tostring(L, -2)))
      req_error(L, rb, 0, "option 'defines': bad macro name %s",
                lua_type(L, -2) == LUA_TSTRING ? lua_pushfstring(L, "'%s'", lua_tostring(L, -2))
                                              : luaL_typename(L, -2));
    int t = lua_type(L, -1);
    if (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)) continue;
    if (t != LUA_TBOOLEAN && t != LUA_TSTRING && t != LUA_TNUMBER)
      req_error(L, rb, 0, "option 'defines.%s' must be a string, number or boolean, got %s",
                lua_tostring(L, -2), luaL_typename(L, -1));
    lua_pushvalue(L, -2);
    v[k].name = anchor_top(L, rb);
    v[k].value = NULL;
    if (t != LUA_TBOOLEAN) {
      lua_pushvalue(L, -1); /* tostring converts its own copy, never the key lua_next needs */
      lua_tostring(L, -1);
      v[k].value = anchor_top(L, rb);
    }
    k++;
  }
  anchor_top(L, rb);
  lua_pop(L, 1);
  rb->req.defines = v;
  rb->req.ndefines = k;
}

/* headers = { ["name.h"] = source }: what #include "name.h" finds before any folder. */
static void build_headers(lua_State *L, reqbuild *rb) {
  const char *src = rb->req.source;
  int want_stdint = src && (strstr(src, "stdint.h") || strstr(src, "<cstdint>"));
  /* a fresh table: the caller's headers plus the built-ins (never the caller's table) */
  lua_newtable(L);
  int tab = lua_gettop(L);
  if (get_opt(L, rb, "headers") != LUA_TNIL) {
    if (!lua_istable(L, -1))
      req_error(L, rb, 0, "option 'headers' must be a table, got %s", luaL_typename(L, -1));
    for (lua_pushnil(L); lua_next(L, tab + 1); lua_pop(L, 1)) {
      if (lua_type(L, -2) != LUA_TSTRING)
        req_error(L, rb, 0, "option 'headers' must map names to sources, got a %s key", luaL_typename(L, -2));
      lua_pushvalue(L, -2);
      lua_pushvalue(L, -2);
      lua_rawset(L, tab);
    }
    lua_pop(L, 1);
  }
  if (want_stdint) {
    for (int i = 0; i < 2; i++) {
      const char *nm = i ? "cstdint" : "stdint.h";
      if (lua_getfield(L, tab, nm) == LUA_TNIL) {
        lua_pushstring(L, km_nvrtc_builtin_stdint);
        lua_setfield(L, tab, nm);
      }
      lua_pop(L, 1);
    }
  }
  size_t n = 0;
  for (lua_pushnil(L); lua_next(L, tab); lua_pop(L, 1)) n++;
  if (n == 0) { lua_pop(L, 1); return; }
  km_nvrtc_header *v = lua_newuserdatauv(L, (n ? n : 1) * sizeof *v, 0);
  size_t k = 0;
  for (lua_pushnil(L); lua_next(L, tab); lua_pop(L, 1)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      req_error(L, rb, 0, "option 'headers' must map names to sources, got a %s key", luaL_typename(L, -2));
    if (lua_type(L, -1) != LUA_TSTRING)
      req_error(L, rb, 0, "option 'headers[\"%s\"]' must be a string, got %s", lua_tostring(L, -2),
                luaL_typename(L, -1));
    lua_pushvalue(L, -2);
    v[k].name = anchor_top(L, rb);
    lua_pushvalue(L, -1);
    v[k].source = lua_tolstring(L, -1, &v[k].len);
    anchor_top(L, rb);
    k++;
  }
  anchor_top(L, rb);
  lua_pop(L, 1);
  rb->req.headers = v;
  rb->req.nheaders = k;
}

/* Reads the string at stack index src and the opts at index opts (a table, or nil/none)
 * into rb, which compile, key and compile_many all share; raises on misuse. Pushes the
 * anchor table, which must stay on the stack (or be referenced from it) while rb is used. */
static void build_req(lua_State *L, reqbuild *rb, int src, int opts, int entry) {
  memset(rb, 0, sizeof *rb);
  rb->opts = opts;
  rb->entry = entry;
  lua_newtable(L);
  rb->anchor = lua_gettop(L);
  lua_pushvalue(L, src);
  size_t len;
  rb->req.source = lua_tolstring(L, -1, &len);
  rb->req.source_len = len;
  anchor_top(L, rb);
  check_keys(L, rb);

  const char *arch = opt_string(L, rb, "arch");
  if (arch && !km_nvrtc_arch_valid(arch))
    req_error(L, rb, 1, "option 'arch': bad architecture '%s' (want sm_NN, sm_NNa or compute_NN)", arch);
  if (arch) snprintf(rb->arch, sizeof rb->arch, "%s", arch);
  else {
    int major = 0, minor = 0; /* 0: this process holds no context */
    km_cuda_current_arch(&major, &minor);
    km_nvrtc_default_arch(major, minor, rb->arch, sizeof rb->arch);
  }
  rb->req.arch = rb->arch;

  const char *std = opt_string(L, rb, "std");
  if (std && (strncmp(std, "c++", 3) || !std[3] || strspn(std + 3, "0123456789abcdefghijklmnopqrstuvwxyz") != strlen(std + 3)))
    req_error(L, rb, 1, "option 'std': bad language standard '%s' (want c++17, c++20, ...)", std);
  rb->req.std = std;
  rb->req.name = opt_string(L, rb, "name");
  rb->req.want_ptx = opt_bool(L, rb, "ptx", 0);
  build_options(L, rb);
  build_defines(L, rb);
  build_headers(L, rb);
  if (opt_bool(L, rb, "cache", 1)) {
    char dir[4096];
    resolve_cache_dir(L, dir, sizeof dir);
    if (dir[0]) {
      lua_pushstring(L, dir);
      rb->req.cache_dir = anchor_top(L, rb);
    }
  }
}

/* compile(source, opts) and key(source, opts): the arguments are the request. */
static void build_args(lua_State *L, reqbuild *rb) {
  luaL_checktype(L, 1, LUA_TSTRING); /* a number is not CUDA source */
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  build_req(L, rb, 1, 2, 0); /* [src, opts, anchor] */
}

/* ---- results ---- */

static int out_gc(lua_State *L) {
  km_nvrtc_out_free(luaL_checkudata(L, 1, KM_NVRTC_OUT_MT));
  return 0;
}

/* [.., kernels]: { name = { name = .., params = { { name, type, kind }, .. } } } */
static void push_kernels(lua_State *L, const km_nvrtc_kernels *ks) {
  lua_createtable(L, 0, (int)ks->n);
  for (size_t i = 0; i < ks->n; i++) {
    const km_nvrtc_kernel *k = &ks->v[i];
    lua_createtable(L, 0, 2);
    lua_pushstring(L, k->name);
    lua_setfield(L, -2, "name");
    lua_createtable(L, (int)k->nparams, 0);
    for (size_t j = 0; j < k->nparams; j++) {
      lua_createtable(L, 0, 3);
      lua_pushstring(L, k->params[j].name);
      lua_setfield(L, -2, "name");
      lua_pushstring(L, k->params[j].type);
      lua_setfield(L, -2, "type");
      lua_pushstring(L, k->params[j].kind);
      lua_setfield(L, -2, "kind");
      lua_rawseti(L, -2, (lua_Integer)j + 1);
    }
    lua_setfield(L, -2, "params");
    lua_setfield(L, -2, k->name);
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Pushes compile's result table for a successful o. */
static void push_program(lua_State *L, const reqbuild *rb, const km_nvrtc_out *o, double ms) {
  lua_createtable(L, 0, 10);
  if (o->cubin) {
    lua_pushlstring(L, o->cubin, o->cubin_len);
    lua_setfield(L, -2, "cubin");
  }
  if (o->ptx) {
    lua_pushlstring(L, o->ptx, o->ptx_len);
    lua_setfield(L, -2, "ptx");
  }
  lua_pushlstring(L, o->log ? o->log : "", o->log_len);
  lua_setfield(L, -2, "log");
  lua_pushstring(L, rb->arch);
  lua_setfield(L, -2, "arch");
  lua_pushstring(L, rb->req.name ? rb->req.name : "kernel.cu");
  lua_setfield(L, -2, "name");
  lua_pushstring(L, o->key);
  lua_setfield(L, -2, "key");
  lua_pushboolean(L, o->cached);
  lua_setfield(L, -2, "cached");
  lua_pushboolean(L, o->confined);
  lua_setfield(L, -2, "confined");
  lua_pushnumber(L, ms);
  lua_setfield(L, -2, "ms");
  push_kernels(L, &o->kernels);
  lua_setfield(L, -2, "kernels");
}

/* Pushes what a failed o says: the log itself for a compile error, else the message. */
static void push_failure(lua_State *L, const km_nvrtc_out *o) {
  if (o->result == NVRTC_ERROR_COMPILATION)
    lua_pushlstring(L, o->log ? o->log : "", o->log_len);
  else
    lua_pushstring(L, o->message);
}

/* ---- module functions ---- */

static int nvrtc_compile(lua_State *L) {
  reqbuild rb;
  build_args(L, &rb);
  /* The result lives in a userdata whose __gc frees it, so a raise while pushing (out of
   * memory) leaks nothing. */
  km_nvrtc_out *o = lua_newuserdatauv(L, sizeof *o, 0); /* [src, opts, anchor, out] */
  memset(o, 0, sizeof *o);
  luaL_setmetatable(L, KM_NVRTC_OUT_MT);
  double t0 = now_ms();
  int rc = km_nvrtc_compile_c(&rb.req, o);
  double ms = now_ms() - t0;
  if (rc) {
    km_nvrtc_out_free(o);
    return luaL_error(L, "km.nvrtc.compile: %s", km_strerror(rc));
  }
  if (o->result) {
    lua_pushnil(L);
    push_failure(L, o);
    lua_pushstring(L, o->code);
    km_nvrtc_out_free(o);
    return 3;
  }
  push_program(L, &rb, o, ms);
  km_nvrtc_out_free(o);
  return 1;
}

static int nvrtc_key(lua_State *L) {
  reqbuild rb;
  build_args(L, &rb);
  char key[KM_SHA256_HEX];
  int rc = km_nvrtc_key(&rb.req, key);
  if (rc) return luaL_error(L, "km.nvrtc.key: %s", km_strerror(rc));
  lua_pushstring(L, key);
  return 1;
}

/* ---- compile_many: requests built in Lua, compiled on pthreads, pushed after ---- */

typedef struct many_slot {
  km_nvrtc_out out;
  int rc;    /* km_nvrtc_compile_c's status */
  double ms; /* wall time of this entry's compile on its thread */
} many_slot;

/* The results of one compile_many, boxed in a userdata whose __gc frees them, so neither
 * a raise while pushing nor one for a bad entry can leak what the threads produced. */
typedef struct many_box {
  size_t n;
  many_slot v[];
} many_box;

static int many_gc(lua_State *L) {
  many_box *b = luaL_checkudata(L, 1, KM_NVRTC_MANY_MT);
  for (size_t i = 0; i < b->n; i++) km_nvrtc_out_free(&b->v[i].out);
  return 0;
}

/* What the threads share: read-only requests, one slot each, and the next index to take
 * (entries differ in cost, so each thread takes the next one when it is free). */
typedef struct many_work {
  const reqbuild *rbs;
  many_slot *slots;
  size_t n;
  atomic_size_t next;
} many_work;

static void *many_thread(void *arg) {
  many_work *w = arg;
  for (;;) {
    size_t i = atomic_fetch_add(&w->next, 1);
    if (i >= w->n) return NULL;
    double t0 = now_ms();
    w->slots[i].rc = km_nvrtc_compile_c(&w->rbs[i].req, &w->slots[i].out);
    w->slots[i].ms = now_ms() - t0;
  }
}

/* Runs w on `threads` threads, the calling one included; a thread that cannot be created
 * leaves its share to the others. */
static void many_run(many_work *w, int threads) {
  enum { MAX_THREADS = 256 };
  pthread_t tid[MAX_THREADS];
  int started = 0;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  pthread_attr_t attr;
  int have_attr = pthread_attr_init(&attr) == 0;
  /* NVRTC's front end recurses deeply on template-heavy code: give it what the main
   * thread usually has, whatever the process default for new threads. */
  if (have_attr) pthread_attr_setstacksize(&attr, (size_t)16 << 20);
  for (int i = 1; i < threads; i++) {
    if (pthread_create(&tid[started], have_attr ? &attr : NULL, many_thread, w)) break;
    started++;
  }
  if (have_attr) pthread_attr_destroy(&attr);
  many_thread(w);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

/* compile_many({ { source, opts }, ... }, { threads = N }) -> { result_or_failure, ... } */
static int nvrtc_compile_many(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  int threads = 0;
  if (!lua_isnil(L, 2)) {
    for (lua_pushnil(L); lua_next(L, 2); lua_pop(L, 1))
      if (lua_type(L, -2) != LUA_TSTRING || strcmp(lua_tostring(L, -2), "threads"))
        luaL_argerror(L, 2, lua_pushfstring(L, "unknown option '%s'", luaL_tolstring(L, -2, NULL)));
    if (lua_getfield(L, 2, "threads") != LUA_TNIL) {
      int isint = 0;
      lua_Integer t = lua_tointegerx(L, -1, &isint);
      if (lua_type(L, -1) != LUA_TNUMBER || !isint || t < 1)
        luaL_argerror(L, 2, "option 'threads' must be a positive integer");
      threads = t > 1024 ? 1024 : (int)t;
    }
    lua_pop(L, 1);
  }
  size_t n = (size_t)lua_rawlen(L, 1);
  if (threads == 0) threads = online_cpus();
  if ((size_t)threads > n) threads = (int)n;

  /* [list, opts, rbs, anchors, box]: the requests, what they borrow, the results */
  reqbuild *rbs = lua_newuserdatauv(L, (n ? n : 1) * sizeof *rbs, 0);
  lua_createtable(L, (int)n, 0);
  int anchors = lua_gettop(L);
  many_box *box = lua_newuserdatauv(L, sizeof *box + n * sizeof box->v[0], 0);
  box->n = 0;
  luaL_setmetatable(L, KM_NVRTC_MANY_MT);
  memset(box->v, 0, n * sizeof box->v[0]);
  box->n = n;
  int top = lua_gettop(L);

  for (size_t i = 0; i < n; i++) {
    int e = (int)i + 1;
    int t = lua_rawgeti(L, 1, (lua_Integer)e); /* [.., entry] */
    if (t != LUA_TTABLE)
      luaL_error(L, "compile_many: entry %d: expected a { source, opts } table, got %s", e,
                 luaL_typename(L, -1));
    lua_rawgeti(L, top + 1, 1); /* [.., entry, source] */
    lua_rawgeti(L, top + 1, 2); /* [.., entry, source, opts] */
    if (lua_type(L, top + 2) != LUA_TSTRING)
      luaL_error(L, "compile_many: entry %d: source must be a string, got %s", e, luaL_typename(L, top + 2));
    if (!lua_isnil(L, top + 3) && !lua_istable(L, top + 3))
      luaL_error(L, "compile_many: entry %d: opts must be a table, got %s", e, luaL_typename(L, top + 3));
    build_req(L, &rbs[i], top + 2, top + 3, e); /* [.., entry, source, opts, anchor] */
    lua_rawseti(L, anchors, (lua_Integer)e);
    lua_settop(L, top);
  }

  /* No Lua from here until the threads are joined: they read rbs and the anchored
   * strings, and write only their own slots. */
  many_work w = {rbs, box->v, n, 0};
  if (n) many_run(&w, threads);

  for (size_t i = 0; i < n; i++)
    if (box->v[i].rc)
      return luaL_error(L, "km.nvrtc.compile_many: entry %d: %s", (int)i + 1, km_strerror(box->v[i].rc));
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    km_nvrtc_out *o = &box->v[i].out;
    if (o->result) {
      lua_createtable(L, 0, 4);
      push_failure(L, o);
      lua_setfield(L, -2, "error");
      lua_pushstring(L, o->code);
      lua_setfield(L, -2, "code");
      lua_pushstring(L, o->key);
      lua_setfield(L, -2, "key");
      lua_pushnumber(L, box->v[i].ms);
      lua_setfield(L, -2, "ms");
    } else {
      push_program(L, &rbs[i], o, box->v[i].ms);
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
    km_nvrtc_out_free(o); /* pushed: release it now rather than at the next GC */
  }
  return 1;
}

static int nvrtc_parse_kernels(lua_State *L) {
  size_t len;
  luaL_checktype(L, 1, LUA_TSTRING);
  const char *src = lua_tolstring(L, 1, &len);
  km_nvrtc_kernels ks;
  int rc = km_nvrtc_parse_kernels(src, len, &ks);
  if (rc) return luaL_error(L, "km.nvrtc.parse_kernels: %s", km_strerror(rc));
  /* Copy into a boxed out so the list is freed even if pushing raises. */
  km_nvrtc_out *o = lua_newuserdatauv(L, sizeof *o, 0);
  memset(o, 0, sizeof *o);
  o->kernels = ks;
  luaL_setmetatable(L, KM_NVRTC_OUT_MT);
  push_kernels(L, &o->kernels);
  km_nvrtc_out_free(o);
  return 1;
}

static int nvrtc_version(lua_State *L) {
  char v[32];
  km_nvrtc_version(v);
  lua_pushstring(L, v);
  return 1;
}

/* confinement() -> "landlock" | nil, why: whether compiles run confined to the toolkit's
 * include tree (km_confine_core.h) */
static int nvrtc_confinement(lua_State *L) {
  const char *why = NULL;
  if (km_nvrtc_confinement(&why)) {
    lua_pushliteral(L, "landlock");
    return 1;
  }
  return km_fail(L, "UNCONFINED", "%s", why ? why : "no confinement");
}

static int nvrtc_cache_dir(lua_State *L) {
  char dir[4096];
  resolve_cache_dir(L, dir, sizeof dir);
  if (dir[0]) lua_pushstring(L, dir);
  else lua_pushnil(L);
  return 1;
}

/* set_cache_dir(path) overrides the environment for this Lua state; set_cache_dir(nil)
 * goes back to it. Returns the previous override (nil when there was none). */
static int nvrtc_set_cache_dir(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) {
    const char *s = luaL_checkstring(L, 1);
    luaL_argcheck(L, *s != '\0', 1, "empty path");
  }
  lua_settop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, KM_NVRTC_DIR_KEY); /* [path, old] */
  lua_pushvalue(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, KM_NVRTC_DIR_KEY);
  return 1;
}

int luaopen_km_nvrtc(lua_State *L) {
  static const luaL_Reg fns[] = {{"version", nvrtc_version},
                                 {"compile", nvrtc_compile},
                                 {"compile_many", nvrtc_compile_many},
                                 {"key", nvrtc_key},
                                 {"parse_kernels", nvrtc_parse_kernels},
                                 {"cache_dir", nvrtc_cache_dir},
                                 {"confinement", nvrtc_confinement},
                                 {"set_cache_dir", nvrtc_set_cache_dir},
                                 {NULL, NULL}};
  if (luaL_newmetatable(L, KM_NVRTC_OUT_MT)) {
    lua_pushcfunction(L, out_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, KM_NVRTC_MANY_MT)) {
    lua_pushcfunction(L, many_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_newlib(L, fns);
  return 1;
}
