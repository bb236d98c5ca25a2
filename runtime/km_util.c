/* km_util.c — shared helpers for the Lua bindings (km.h), and the Lua side of the driver
 * (km_cuda.h): a failed CUDA call as nil, message, code or as an error. */
#include <stdarg.h>
#include <stdio.h>
#include <lua.h>
#include <lauxlib.h>
#include "km.h"
#include "km_cuda.h"

int km_fail(lua_State *L, const char *code, const char *fmt, ...) {
  va_list ap;
  lua_pushnil(L);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_pushstring(L, code);
  return 3;
}

void km_newclass(lua_State *L, const char *mtname, const luaL_Reg *methods,
                 lua_CFunction release) {
  luaL_newmetatable(L, mtname);           /* [mt] */
  lua_newtable(L);                        /* [mt, methods] */
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");         /* [mt] */
  if (release) {
    lua_pushcfunction(L, release);
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

/* ---- the Lua side of the driver ---- */

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
