/* km_lua_module.c — `require "km"` from a stock Lua 5.4 (build/lib/lua/km.so; built into kmrun too).
 *
 *   LUA_CPATH='build/lib/lua/?.so;;' LUA_PATH='lua/?.lua;;' lua5.4 -e 'local km = require "km"'
 *
 * Loading km puts every built-in km.* module (km.cuda, km.nvrtc, ...) in package.preload, as
 * kmrun does, and sets package.km_libdir (the km.* Lua library beside this module, for the
 * tools that look for guidance/ and strategies/) and package.km_exe (the kmrun program, which
 * km.serve.pool starts as its GPU workers) unless they are set. It returns a table whose fields
 * load on first use: km.cuda is require "km.cuda", km.task is require "km.task".
 * `require "km.cuda"` alone also works (Lua's all-in-one loader finds its luaopen function here),
 * but only `require "km"` sets the two package fields. */
#include <limits.h>

#include <lua.h>
#include <lauxlib.h>

#include "kmrun.h"
#include "km_api.h"

static int km_index(lua_State *L) {
  /* [t, key] */
  const char *key = luaL_checkstring(L, 2);
  lua_getglobal(L, "require");
  lua_pushfstring(L, "km.%s", key);
  lua_call(L, 1, 1);          /* [t, key, module] */
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);           /* cached: the next access is a plain field */
  return 1;
}

int luaopen_km(lua_State *L) {
  km_api_preload(L, luaopen_km);
  char libdir[PATH_MAX], exe[PATH_MAX];
  km_api_find_paths(libdir, sizeof libdir, exe, sizeof exe);
  lua_getglobal(L, "package");              /* [package] */
  if (lua_getfield(L, -1, "km_libdir") == LUA_TNIL && libdir[0]) {
    lua_pushstring(L, libdir);
    lua_setfield(L, -3, "km_libdir");
  }
  lua_pop(L, 1);
  if (lua_getfield(L, -1, "km_exe") == LUA_TNIL && exe[0]) {
    lua_pushstring(L, exe);
    lua_setfield(L, -3, "km_exe");
  }
  lua_pop(L, 2);                            /* [] */
  lua_createtable(L, 0, 4);                 /* [km] */
  lua_pushstring(L, KMRUN_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushstring(L, LUA_RELEASE);
  lua_setfield(L, -2, "lua_release");
  lua_createtable(L, 0, 1);                 /* [km, mt] */
  lua_pushcfunction(L, km_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  return 1;
}
