/* km.h — what every kmrun C file shares: the error conventions and small Lua helpers.
 *
 * Errors come in three tiers (STYLE.md): misuse raises (luaL_check*, luaL_error);
 * expected failures return nil, message, CODE (km_fail); pure C returns 0 or a negative
 * KM_E* status that km_strerror() names. */
#ifndef KM_H
#define KM_H

#include <stddef.h>
#include <stdint.h>

#define KM_VERSION "0.1.0"

/* ---- pure C status codes ---- */
enum {
  KM_OK = 0,
  KM_ENOMEM = -1,    /* out of host memory */
  KM_EINVAL = -2,    /* bad argument */
  KM_EIO = -3,       /* file system error (errno has more) */
  KM_ECORRUPT = -4,  /* data failed its integrity check */
  KM_ERANGE = -5,    /* value out of range */
  KM_ENOTFOUND = -6, /* no such entry */
  KM_EREFUSED = -7,  /* refused by policy (km.nvrtc's closed world) */
};
const char *km_strerror(int status);

#ifdef LUA_VERSION_NUM
/* Pushes nil, "message", "CODE" and returns 3: the expected-failure triple. */
/* fmt takes lua_pushfstring's directives (%s %d %I %f %p %%), not printf's. */
int km_fail(lua_State *L, const char *code, const char *fmt, ...);

/* Registers functions into a new table and sets __index on a metatable. */
void km_newclass(lua_State *L, const char *mtname, const luaL_Reg *methods,
                 lua_CFunction release);

/* While a timing runs (km_timing.c), the finalizers of km_newclass objects keep them instead
 * of releasing device resources (a release may wait for the device); km_gc_defer_end, at the
 * outermost end, releases every object kept and returns how many. Nestable. */
void km_gc_defer_begin(lua_State *L);
int km_gc_defer_end(lua_State *L);
/* timing.finalize(obj, fn), for finalizers written in Lua that may wait for the device:
 * fn(obj) now, or kept for km_gc_defer_end while a timing runs. */
int km_gc_finalize(lua_State *L);

/* A sample of lines for a check (km_compare_core.h's km_lines) from the table at idx,
 * { key = integer, shift = 0..20[, bytes = line bytes] }; raises an argument error for `arg`
 * otherwise. */
struct km_lines;
void km_check_lines(lua_State *L, int idx, int arg, struct km_lines *out);

/* Reads an optional field from the table at idx; the default when absent or nil. */
lua_Integer km_optfield_int(lua_State *L, int idx, const char *field, lua_Integer def);
lua_Number km_optfield_num(lua_State *L, int idx, const char *field, lua_Number def);
const char *km_optfield_str(lua_State *L, int idx, const char *field, const char *def);
int km_optfield_bool(lua_State *L, int idx, const char *field, int def);

/* argv (the table at argv_idx: the program, then its arguments) and envp (this process's
 * environment, only km_scrub_env_allowed entries when clean, overridden by the name = value
 * table at env_idx when that is a table; 0: none) for posix_spawn. Pushes three values that
 * own both arrays and their strings (nothing leaks if anything raises); they are valid until
 * those are popped. Raises on a bad argv or env. */
void km_spawn_args(lua_State *L, int argv_idx, int env_idx, int clean, const char ***argv,
                   const char ***envp);

/* posix_spawn attributes for a child of kmrun: no signal blocked (whatever this thread has
 * blocked), plus `flags` (POSIX_SPAWN_*). The caller destroys them. */
#include <spawn.h>
void km_spawnattr_init(posix_spawnattr_t *attr, short flags);
#endif

#endif
