/* km_core.c — `require "km.core"`: versions and small facts about this build. */
#include <lua.h>
#include <lauxlib.h>
#include "km.h"

static int core_version(lua_State *L) {
  lua_pushstring(L, KM_VERSION);
  return 1;
}

int luaopen_km_core(lua_State *L) {
  static const luaL_Reg fns[] = {{"version", core_version}, {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushstring(L, LUA_RELEASE);
  lua_setfield(L, -2, "lua_release");
  return 1;
}
