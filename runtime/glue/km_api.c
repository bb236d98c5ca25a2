/* km_api.c — how a Lua state gets kmrun's modules and library (km_api.h): the built-in
 * modules into package.preload, the public names of Lua modules (a searcher), package.path
 * from KM_PATH and the library's folder, and where the library and the kmrun program are.
 * Used by the kmrun program (kmrun.c), the C API's km_run_script (kmrun_api.c) and
 * `require "km"` (km_lua_module.c); the first two also get an os.tmpname that honours TMPDIR. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "km_api.h"

#define KM_MODULE(name) int luaopen_km_##name(lua_State *L);
#include "km_modules.inc"
#undef KM_MODULE

static const luaL_Reg builtin[] = {
#define KM_MODULE(name) {"km." #name, luaopen_km_##name},
#include "km_modules.inc"
#undef KM_MODULE
    {NULL, NULL}};

/* The public names: the modules strategies and user code require by the names docs/strategies.md
 * shows, mapped to where they live in lua/km's folders. One table, read by the searcher below,
 * which every host's Lua state gets (kmrun, km_run_script, `require "km"` from a stock lua5.4).
 * The tree itself uses the new names (tests/lua/test_public_names.lua checks both). */
static const struct {
  const char *name, *module;
} public_names[] = {
    {"km.prompt", "km.run.prompt"},   {"km.steps", "km.run.steps"},       {"km.search", "km.run.search"},
    {"km.context", "km.run.context"}, {"km.model", "km.run.model"},       {"km.guidance", "km.run.guidance"},
    {"km.eval", "km.serve.pool"},       {"km.runner", "km.run.runner"},     {"km.dataset", "km.data.dataset"},
    {"km.dedup", "km.data.dedup"},    {"km.kernelbench", "km.task.kernelbench"},
};

/* loader(name, module): require(module), so both names give the one table. */
static int public_load(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushvalue(L, 2);
  lua_call(L, 1, 1);
  return 1;
}

/* package.searchers' last entry: a public name -> its loader; after the others, so a file of
 * that name on KM_PATH or LUA_PATH still comes first. */
static int public_searcher(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  for (size_t i = 0; i < sizeof public_names / sizeof public_names[0]; i++) {
    if (strcmp(name, public_names[i].name) == 0) {
      lua_pushcfunction(L, public_load);
      lua_pushstring(L, public_names[i].module);
      return 2;
    }
  }
  lua_pushfstring(L, "no public name '%s' (km_api.c)", name);
  return 1;
}

/* Adds public_searcher to package.searchers once per state. */
static void add_public_searcher(lua_State *L) {
  static const char key = 0;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &key) != LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  lua_pop(L, 1);
  lua_getglobal(L, "package");
  if (lua_getfield(L, -1, "searchers") == LUA_TTABLE) {
    lua_pushcfunction(L, public_searcher);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pushboolean(L, 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &key);
  }
  lua_pop(L, 2);
}

/* Every built-in km.* module, and km itself (open_km: km_lua_module.c's luaopen_km, passed
 * in so that this file does not depend on the module that calls it), into package.preload
 * (kept when already there); the public names' searcher into package.searchers. */
void km_api_preload(lua_State *L, lua_CFunction open_km) {
  add_public_searcher(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  if (lua_getfield(L, -1, "km") == LUA_TNIL) {
    lua_pushcfunction(L, open_km);
    lua_setfield(L, -3, "km");
  }
  lua_pop(L, 1);
  for (const luaL_Reg *m = builtin; m->name; m++) {
    if (lua_getfield(L, -1, m->name) == LUA_TNIL) {
      lua_pushcfunction(L, m->func);
      lua_setfield(L, -3, m->name);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_exe(const char *p) { return access(p, X_OK) == 0; }

/* The folder this library (or the program it is linked into) lives in. */
static void self_dir(char *out, size_t n) {
  Dl_info info;
  out[0] = '\0';
  char real[PATH_MAX];
  if (dladdr((void *)&km_api_find_paths, &info) && info.dli_fname && realpath(info.dli_fname, real)) {
    char *slash = strrchr(real, '/');
    if (slash) *slash = '\0';
    snprintf(out, n, "%s", real);
  }
}

void km_api_find_dir(const char *dir, const char *const *cands, size_t ncands, const char *probe, char *out,
                     size_t n) {
  out[0] = '\0';
  for (size_t i = 0; dir[0] && i < ncands; i++) {
    char p[PATH_MAX + 32], pp[PATH_MAX + 64], real[PATH_MAX];
    snprintf(p, sizeof p, cands[i], dir);
    if (probe) snprintf(pp, sizeof pp, "%s/%s", p, probe);
    if ((probe ? access(pp, R_OK) == 0 : is_dir(p)) && realpath(p, real)) {
      snprintf(out, n, "%s", real);
      return;
    }
  }
}

void km_api_add_path(luaL_Buffer *b, const char *libdir) {
  const char *kmpath = getenv("KM_PATH");
  if (kmpath && *kmpath) {
    char *copy = strdup(kmpath), *save = NULL;
    for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d; d = strtok_r(NULL, ":", &save)) {
      lua_pushfstring(b->L, "%s/?.lua;%s/?/init.lua;", d, d);
      luaL_addvalue(b);
    }
    free(copy);
  }
  if (libdir[0]) {
    lua_pushfstring(b->L, "%s/?.lua;%s/?/init.lua", libdir, libdir);
    luaL_addvalue(b);
  }
}

/* The km.* Lua library and the kmrun program (for workers) that belong to this library:
 * libkmrun.so in <build>/lib or <prefix>/lib, km.so in <build>/lib/lua or <prefix>/lib/lua/5.4. */
void km_api_find_paths(char *libdir, size_t nl, char *exe, size_t ne) {
  char self[PATH_MAX];
  self_dir(self, sizeof self);
  exe[0] = '\0';
  static const char *const lcands[] = {"%s/../share/kmrun/lua", "%s/../../lua", "%s/../../../share/kmrun/lua",
                                       "%s/../../../lua", "%s/../lua", "%s/lua"};
  km_api_find_dir(self, lcands, sizeof lcands / sizeof *lcands, "km/main.lua", libdir, nl);
  const char *e = getenv("KM_EXE");
  if (e && *e) { snprintf(exe, ne, "%s", e); return; }
  const char *ecands[] = {"%s/../bin/kmrun", "%s/../kmrun", "%s/../../kmrun", "%s/../../../bin/kmrun", "%s/kmrun"};
  for (size_t i = 0; self[0] && i < sizeof ecands / sizeof *ecands; i++) {
    char p[PATH_MAX + 32], real[PATH_MAX];
    snprintf(p, sizeof p, ecands[i], self);
    if (is_exe(p) && !is_dir(p) && realpath(p, real)) { snprintf(exe, ne, "%s", real); return; }
  }
}


/* os.tmpname(): an empty file made by mkstemp in $TMPDIR (else /tmp), as Lua's own does in
 * /tmp alone; a test run (tests/exec) or a user who sets TMPDIR keeps the system's temp
 * folder clean. */
static int os_tmpname(lua_State *L) {
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char buf[PATH_MAX];
  int n = snprintf(buf, sizeof buf, "%s%slua_XXXXXX", dir, dir[strlen(dir) - 1] == '/' ? "" : "/");
  int fd = n > 0 && (size_t)n < sizeof buf ? mkstemp(buf) : -1;
  if (fd == -1) return luaL_error(L, "unable to generate a unique filename in %s", dir);
  close(fd);
  lua_pushstring(L, buf);
  return 1;
}

void km_api_tmpname(lua_State *L) {
  if (lua_getglobal(L, "os") == LUA_TTABLE) {
    lua_pushcfunction(L, os_tmpname);
    lua_setfield(L, -2, "tmpname");
  }
  lua_pop(L, 1);
}
