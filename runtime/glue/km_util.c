/* km_util.c — shared helpers for the Lua bindings (km.h), and the Lua side of the driver
 * (km_util.h): a failed CUDA call as nil, message, code or as an error. */
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <string.h>
#include <stdio.h>
#include <lua.h>
#include <lauxlib.h>
#include "km.h"
#include "km_util.h"
#include "km_compare_core.h"
#include "km_scrub_core.h"

int km_fail(lua_State *L, const char *code, const char *fmt, ...) {
  va_list ap;
  lua_pushnil(L);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_pushstring(L, code);
  return 3;
}

void km_check_lines(lua_State *L, int idx, int arg, struct km_lines *out) {
  idx = lua_absindex(L, idx);
  int okk = 0, oks = 0;
  luaL_argcheck(L, lua_istable(L, idx), arg, "lines: { key = integer, shift = 0..20 } expected");
  lua_getfield(L, idx, "key");
  lua_Integer key = lua_tointegerx(L, -1, &okk);
  lua_getfield(L, idx, "shift");
  lua_Integer shift = lua_tointegerx(L, -1, &oks);
  int okb = 1;
  lua_Integer bytes = lua_getfield(L, idx, "bytes") == LUA_TNIL ? 0 : lua_tointegerx(L, -1, &okb);
  lua_pop(L, 3);
  luaL_argcheck(L, okk && oks && shift >= 0 && shift <= 20 && okb && bytes >= 0 && bytes <= ((lua_Integer)1 << 40), arg,
                "lines: { key = integer, shift = 0..20[, bytes = line bytes] } expected");
  out->key = (uint64_t)key;
  out->shift = (unsigned)shift;
  out->bytes = (uint64_t)bytes;
}

/* ---- finalizers deferred while a timing runs ----
 * A class's release may free device memory or unload a module, and those wait for the
 * device: inside a timing's sample loop a finalizer must not (km.timing). So while
 * km_gc_defer_begin is in force, a finalizer keeps its object instead (a list in the
 * registry: the object lives on, its finalizer has run) and km_gc_defer_end releases every
 * kept object through its release function, once the timing is done. The collector itself
 * keeps running. */
#define DEFER_DEPTH "km.gc_defer_depth"
#define DEFER_LIST "km.gc_defer_list"

static lua_Integer defer_depth(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, DEFER_DEPTH);
  lua_Integer d = lua_tointeger(L, -1);
  lua_pop(L, 1);
  return d;
}

void km_gc_defer_begin(lua_State *L) {
  lua_pushinteger(L, defer_depth(L) + 1);
  lua_setfield(L, LUA_REGISTRYINDEX, DEFER_DEPTH);
}

/* Keeps obj (at idx) and its release fn (at fidx; 0: obj's __close) for km_gc_defer_end. */
static void defer_keep(lua_State *L, int idx, int fidx) {
  idx = lua_absindex(L, idx);
  if (fidx) fidx = lua_absindex(L, fidx);
  if (lua_getfield(L, LUA_REGISTRYINDEX, DEFER_LIST) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, DEFER_LIST);
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  lua_pushvalue(L, idx);
  lua_rawseti(L, -2, n + 1);
  if (fidx) lua_pushvalue(L, fidx); else lua_pushboolean(L, 0);
  lua_rawseti(L, -2, n + 2);
  lua_pop(L, 1);
}

int km_gc_defer_end(lua_State *L) {
  lua_Integer d = defer_depth(L) - 1;
  lua_pushinteger(L, d > 0 ? d : 0);
  lua_setfield(L, LUA_REGISTRYINDEX, DEFER_DEPTH);
  if (d > 0) return 0;
  int n = 0;
  /* the list is taken first: a release may allocate and collect, and what is finalized
   * then (depth is 0) is released at once, not kept */
  while (lua_getfield(L, LUA_REGISTRYINDEX, DEFER_LIST) == LUA_TTABLE) {
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, DEFER_LIST); /* [list] */
    lua_Integer len = (lua_Integer)lua_rawlen(L, -1);
    for (lua_Integer i = 1; i + 1 <= len; i += 2) {
      lua_rawgeti(L, -1, i + 1);              /* [list, fn|false] */
      lua_rawgeti(L, -2, i);                  /* [list, fn|false, obj] */
      if (!lua_toboolean(L, -2)) {
        lua_remove(L, -2);                    /* [list, obj] */
        if (luaL_getmetafield(L, -1, "__close") == LUA_TNIL) { lua_pop(L, 1); continue; }
        lua_insert(L, -2);                    /* [list, release, obj] */
      }
      /* a release that raises is reported like a finalizer's error, and the rest go on */
      if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        lua_warning(L, "error in a deferred finalizer (", 1);
        lua_warning(L, lua_tostring(L, -1) ? lua_tostring(L, -1) : "?", 1);
        lua_warning(L, ")", 0);
        lua_pop(L, 1);
      }
      n++;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

/* __gc of a class with a release: the release now, or, inside km_gc_defer_begin/end, the
 * object kept for km_gc_defer_end. */
static int gc_release(lua_State *L) {
  if (defer_depth(L) > 0) {
    defer_keep(L, 1, 0);
    return 0;
  }
  lua_CFunction release = lua_tocfunction(L, lua_upvalueindex(1));
  lua_settop(L, 1);
  return release(L);
}

int km_gc_finalize(lua_State *L) {
  luaL_checkany(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  if (defer_depth(L) > 0) {
    defer_keep(L, 1, 2);
    return 0;
  }
  lua_settop(L, 2);
  lua_insert(L, 1);
  lua_call(L, 1, 0);
  return 0;
}

void km_newclass(lua_State *L, const char *mtname, const luaL_Reg *methods,
                 lua_CFunction release) {
  luaL_newmetatable(L, mtname);           /* [mt] */
  lua_newtable(L);                        /* [mt, methods] */
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");         /* [mt] */
  if (release) {
    lua_pushcfunction(L, release);
    lua_pushcclosure(L, gc_release, 1);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, release);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
}

static int field(lua_State *L, int idx, const char *name) {
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  if (lua_getfield(L, idx, name) == LUA_TNIL) { lua_pop(L, 1); return 0; }
  return 1;
}

lua_Integer km_optfield_int(lua_State *L, int idx, const char *name, lua_Integer def) {
  if (!field(L, idx, name)) return def;
  int ok;
  lua_Integer v = lua_tointegerx(L, -1, &ok);
  if (!ok) luaL_error(L, "option '%s' must be an integer, got %s", name, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

lua_Number km_optfield_num(lua_State *L, int idx, const char *name, lua_Number def) {
  if (!field(L, idx, name)) return def;
  int ok;
  lua_Number v = lua_tonumberx(L, -1, &ok);
  if (!ok) luaL_error(L, "option '%s' must be a number, got %s", name, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

/* The string stays valid while the table holds it. */
const char *km_optfield_str(lua_State *L, int idx, const char *name, const char *def) {
  if (!field(L, idx, name)) return def;
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "option '%s' must be a string, got %s", name, luaL_typename(L, -1));
  const char *s = lua_tostring(L, -1);
  lua_pop(L, 1);
  return s;
}

int km_optfield_bool(lua_State *L, int idx, const char *name, int def) {
  if (!field(L, idx, name)) return def;
  int v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* ---- the Lua side of the driver (km_util.h) ---- */

int km_cuda_fail(lua_State *L, CUresult r, const char *what) {
  char msg[KM_CUDA_MSG];
  return km_fail(L, km_cuda_errname(r), "%s", km_cuda_msg(r, what, msg, sizeof msg));
}

int km_cuda_raise(lua_State *L, CUresult r, const char *what) {
  char msg[KM_CUDA_MSG];
  return luaL_error(L, "%s", km_cuda_msg(r, what, msg, sizeof msg));
}

const km_cuda_api *km_cuda_check(lua_State *L) {
  const char *why = NULL;
  const km_cuda_api *a = km_cuda_get(&why);
  if (!a) luaL_error(L, "CUDA unavailable: %s", why);
  return a;
}

CUfunction km_cuda_util(lua_State *L, const char *name) {
  km_cuda_check(L);
  int loaded = km_cuda_util_loaded();
  CUfunction fn;
  CUresult r = km_cuda_util_get(name, &fn);
  if (r != CUDA_SUCCESS) km_cuda_raise(L, r, loaded ? name : "loading kmrun's utility kernels");
  return fn;
}

/* ---- argv, envp and attributes for posix_spawn (km.proc, km.sys) ---- */

void km_spawnattr_init(posix_spawnattr_t *attr, short flags) {
  sigset_t none;
  posix_spawnattr_init(attr);
  sigemptyset(&none);
  posix_spawnattr_setsigmask(attr, &none);
  posix_spawnattr_setflags(attr, (short)(POSIX_SPAWN_SETSIGMASK | flags));
}

extern char **environ;

void km_spawn_args(lua_State *L, int argv_idx, int env_idx, int clean, const char ***argv_out,
                   const char ***envp_out) {
  argv_idx = lua_absindex(L, argv_idx);
  int has_env = env_idx != 0 && lua_istable(L, env_idx);
  if (has_env) env_idx = lua_absindex(L, env_idx);
  int argc = (int)lua_rawlen(L, argv_idx);
  if (argc < 1) luaL_argerror(L, argv_idx, "argv must hold at least the program");
  const char **argv = lua_newuserdatauv(L, sizeof(char *) * (size_t)(argc + 1), 0);
  for (int i = 0; i < argc; i++) {
    lua_rawgeti(L, argv_idx, i + 1);
    argv[i] = luaL_checkstring(L, -1);
    lua_pop(L, 1); /* still referenced by the argv table */
  }
  argv[argc] = NULL;
  int nenv = 0, extra = 0;
  while (environ[nenv]) nenv++;
  if (has_env)
    for (lua_pushnil(L); lua_next(L, env_idx); lua_pop(L, 1)) extra++;
  const char **envp = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nenv + extra + 1), 0);
  lua_newtable(L); /* anchors the "NAME=value" strings until the spawn */
  int anchor = lua_gettop(L), k = 0;
  if (has_env)
    for (lua_pushnil(L); lua_next(L, env_idx); lua_pop(L, 1)) {
      if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "spawn: env keys must be strings");
      const char *val = luaL_tolstring(L, -1, NULL); /* [.., key, value, str] */
      envp[k++] = lua_pushfstring(L, "%s=%s", lua_tostring(L, -3), val);
      lua_rawseti(L, anchor, k);
      lua_pop(L, 1);
    }
  for (int i = 0; i < nenv; i++) {
    /* clean: only the allow-list passes, never a key (km_scrub_env_allowed) */
    if (clean && !km_scrub_env_allowed(environ[i])) continue;
    /* the table's entries override inherited ones */
    const char *eq = strchr(environ[i], '=');
    int shadowed = 0;
    for (int j = 0; j < extra && eq; j++)
      if (!strncmp(envp[j], environ[i], (size_t)(eq - environ[i]) + 1)) shadowed = 1;
    if (!shadowed) envp[k++] = environ[i];
  }
  envp[k] = NULL;
  *argv_out = argv;
  *envp_out = envp;
}
