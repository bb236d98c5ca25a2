/* km_api.h — how a Lua state gets kmrun's modules and library, said once (km_api.c) for
 * the three hosts that set one up: the kmrun program (kmrun.c), km_run_script in libkmrun,
 * and `require "km"` from a stock lua5.4 (km_lua_module.c). Private: not in kmrun.h, not
 * exported from libkmrun.so.
 *
 * Ownership: every output is a caller's buffer; nothing here allocates what outlives a call. */
#ifndef KM_API_H
#define KM_API_H
#include <stddef.h>

/* The first of cands (printf patterns with one %s, filled with dir) that is a folder, and
 * holds the file probe when probe is not NULL, made absolute into out; "" when none is (or
 * dir is ""). */
void km_api_find_dir(const char *dir, const char *const *cands, size_t ncands, const char *probe, char *out,
                     size_t n);

/* The km.* Lua library and the kmrun program (KM_EXE, else found beside this library);
 * "" for what is not found. */
void km_api_find_paths(char *libdir, size_t nl, char *exe, size_t ne);

#ifdef LUA_VERSION_NUM
/* Every built-in km.* module, and km itself (open_km: luaopen_km), into package.preload
 * (kept when already there); a searcher for the public names of Lua modules (km.prompt for
 * km.run.prompt, ...) at the end of package.searchers, once. */
void km_api_preload(lua_State *L, lua_CFunction open_km);
/* Adds KM_PATH's folders (':'-separated), then libdir when it is not "", to a package.path
 * being built in b: "D/?.lua;D/?/init.lua" each, ';' between. */
void km_api_add_path(luaL_Buffer *b, const char *libdir);
/* os.tmpname that honours TMPDIR (Lua's own always names a file in /tmp), for the states
 * kmrun opens itself (the program and km_run_script; not a stock lua5.4's). */
void km_api_tmpname(lua_State *L);
#endif
#endif
