/* km_scrub.c — `require "km.scrub"`: the process's secrets, removed from text.
 *
 *   local scrub = require "km.scrub"
 *   local clean, hits = scrub.text(s)   -- every known secret replaced by "[redacted]"
 *   scrub.add(secret)                   -- true when kept (KM_SCRUB_MIN bytes or more)
 *   scrub.count()                       -- secrets known (the environment's key-like values,
 *                                       -- km.llm clients' keys, scrub.add's)
 *   scrub.key_like("OPENAI_API_KEY")    -- true: such a variable's value is a secret
 *
 * The list and the matching are in km_scrub_core.c; NVRTC logs, the store, km.llm request
 * bodies and exports use the same list from C (docs/security.md). */
#include <string.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_scrub_core.h"

static int l_text(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  luaL_Buffer b;
  char *dst = luaL_buffinitsize(L, &b, km_scrub_bound(n));
  size_t hits = 0;
  size_t w = km_scrub_to(s, n, dst, &hits);
  luaL_pushresultsize(&b, w);
  lua_pushinteger(L, (lua_Integer)hits);
  return 2;
}

static int l_add(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  if (n < KM_SCRUB_MIN) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (km_scrub_add(s, n)) return luaL_error(L, "km.scrub.add: %s", km_strerror(KM_ENOMEM));
  lua_pushboolean(L, 1);
  return 1;
}

static int l_count(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)km_scrub_count());
  return 1;
}

static int l_key_like(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  lua_pushboolean(L, km_scrub_key_like(s, n));
  return 1;
}

int luaopen_km_scrub(lua_State *L) {
  static const luaL_Reg fns[] = {{"text", l_text},
                                 {"add", l_add},
                                 {"count", l_count},
                                 {"key_like", l_key_like},
                                 {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushstring(L, KM_SCRUB_MARK);
  lua_setfield(L, -2, "MARK");
  lua_pushinteger(L, KM_SCRUB_MIN);
  lua_setfield(L, -2, "MIN");
  return 1;
}
