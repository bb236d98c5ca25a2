/* km_hash.c — km.hash: SHA-256 of Lua strings, for content-addressed keys made in Lua
 * (PyTorch baselines, problem specs), without Python or a GPU.
 *
 *   local hash = require "km.hash"
 *   hash.sha256("abc")           --> "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
 *   hash.sha256("a", "b", "c")   --> the same digest: the arguments are hashed one after another
 *
 * The digest is km_hash_core.c's, the one NVRTC's cache keys use. */
#include <lua.h>
#include <lauxlib.h>

#include "km_hash_core.h"

static int l_sha256(lua_State *L) {
  int n = lua_gettop(L);
  if (n == 0) return luaL_error(L, "sha256: at least one string expected");
  km_sha256_ctx c;
  km_sha256_init(&c);
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = luaL_checklstring(L, i, &len);
    km_sha256_update(&c, s, len);
  }
  uint8_t d[KM_SHA256_SIZE];
  char hex[KM_SHA256_HEX];
  km_sha256_final(&c, d);
  km_hex(d, sizeof d, hex);
  lua_pushstring(L, hex);
  return 1;
}

int luaopen_km_hash(lua_State *L) {
  static const luaL_Reg fns[] = {{"sha256", l_sha256}, {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
