/* km_nvml.c — `require "km.nvml"`: NVML loaded at run time (plain C: runtime/core/km_nvml_lib.c).
 *
 *   nvml.available()          -> true | nil, why
 *   nvml.load_ahead()         -> true | false: NVML loaded and initialised on a thread of its
 *                                own while the caller goes on (the first use then waits for it)
 *   nvml.energy_mj(dev)       -> millijoules since the driver loaded | nil, why, code
 *   nvml.memory(dev)          -> used, total (bytes) | nil, why, code
 *   nvml.sm_clock(dev)        -> MHz | nil, why, code
 *   nvml.clocks(dev)          -> { sm_mhz, mem_mhz, reasons_mask?, reasons? = { names } } | nil, why, code
 *                                (reasons: why the clocks are below their maximum, NVML's
 *                                clocks event reasons, e.g. "sw_power_cap", "hw_thermal";
 *                                absent where the library cannot say)
 *   local w = nvml.window(dev)
 *   while working do ...; w:poll(calls_done) end  -- true when the counter moved
 *   w:stop() -> joules per call, span ms, calls (between the counter's first and last step
 *               seen) | nil, why, code
 * dev: an NVML index (default 0) or a UUID string as km.cuda.device().uuid gives it.
 * Codes: NO_NVML (library or entry point missing), NVML_ERROR (NVML said no: message
 * attached), TOO_SHORT (fewer than two counter steps seen, or under KM_ENERGY_MIN_MS apart).
 * The library and its energy windows are runtime/core/km_nvml_lib.c; this file translates. */
#include <string.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_nvml_lib.h"

#define KM_EWIN_MT "km.EnergyWindow"

static const char *code_of(int rc) {
  switch (rc) {
  case KM_ENOTFOUND: return "NO_NVML";
  case KM_ERANGE: return "TOO_SHORT";
  default: return "NVML_ERROR";
  }
}

/* The device argument at idx: a UUID string or an NVML index (default 0). Returns 0 or
 * pushes the failure triple and returns 3. */
static int get_dev(lua_State *L, int idx, km_nvml_dev *d) {
  const char *why = NULL;
  int rc;
  if (lua_type(L, idx) == LUA_TSTRING) rc = km_nvml_device(lua_tostring(L, idx), 0, d, &why);
  else {
    lua_Integer i = luaL_optinteger(L, idx, 0);
    luaL_argcheck(L, i >= 0, idx, "device index must be >= 0");
    rc = km_nvml_device(NULL, (unsigned)i, d, &why);
  }
  return rc ? km_fail(L, code_of(rc), "%s", why) : 0;
}

static int l_available(lua_State *L) {
  const char *why = km_nvml_load();
  if (why) { lua_pushnil(L); lua_pushstring(L, why); return 2; }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_load_ahead(lua_State *L) {
  lua_pushboolean(L, km_nvml_load_ahead() == 0);
  return 1;
}

static int l_energy_mj(lua_State *L) {
  km_nvml_dev d;
  if (get_dev(L, 1, &d)) return 3;
  uint64_t mj = 0;
  const char *why = NULL;
  int rc = km_nvml_energy_mj(d, &mj, &why);
  if (rc) return km_fail(L, code_of(rc), "energy: %s", why);
  lua_pushinteger(L, (lua_Integer)mj);
  return 1;
}

static int l_memory(lua_State *L) {
  km_nvml_dev d;
  if (get_dev(L, 1, &d)) return 3;
  uint64_t used = 0, total = 0;
  const char *why = NULL;
  int rc = km_nvml_memory(d, &used, &total, &why);
  if (rc) return km_fail(L, code_of(rc), "memory: %s", why);
  lua_pushinteger(L, (lua_Integer)used);
  lua_pushinteger(L, (lua_Integer)total);
  return 2;
}

static int l_sm_clock(lua_State *L) {
  km_nvml_dev d;
  if (get_dev(L, 1, &d)) return 3;
  unsigned mhz = 0;
  const char *why = NULL;
  int rc = km_nvml_sm_clock(d, &mhz, &why);
  if (rc) return km_fail(L, code_of(rc), "SM clock: %s", why);
  lua_pushinteger(L, mhz);
  return 1;
}

/* NVML's clocks event (throttle) reason bits, by name (nvml.h). */
static const struct { unsigned long long bit; const char *name; } REASONS[] = {
    {0x1ull, "gpu_idle"},           {0x2ull, "applications_clocks"}, {0x4ull, "sw_power_cap"},
    {0x8ull, "hw_slowdown"},        {0x10ull, "sync_boost"},         {0x20ull, "sw_thermal"},
    {0x40ull, "hw_thermal"},        {0x80ull, "hw_power_brake"},     {0x100ull, "display_clocks"}};

static int l_clocks(lua_State *L) {
  km_nvml_dev d;
  if (get_dev(L, 1, &d)) return 3;
  unsigned sm = 0, mem = 0;
  unsigned long long mask = 0;
  const char *why = NULL;
  int rc = km_nvml_clocks(d, &sm, &mem, &mask, &why);
  if (rc && !(rc == KM_ENOTFOUND && sm > 0)) return km_fail(L, code_of(rc), "clocks: %s", why);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, sm); lua_setfield(L, -2, "sm_mhz");
  lua_pushinteger(L, mem); lua_setfield(L, -2, "mem_mhz");
  if (rc) return 1; /* no reasons entry point: the clocks alone */
  lua_pushinteger(L, (lua_Integer)mask); lua_setfield(L, -2, "reasons_mask");
  lua_newtable(L);
  int n = 0;
  for (size_t i = 0; i < sizeof REASONS / sizeof REASONS[0]; i++)
    if (mask & REASONS[i].bit) lua_pushstring(L, REASONS[i].name), lua_rawseti(L, -2, ++n);
  lua_setfield(L, -2, "reasons");
  return 1;
}

/* nvml.window(dev) -> a window started now (it holds no resource) */
static int l_window(lua_State *L) {
  km_nvml_dev d = NULL;
  km_energy_window *w = lua_newuserdatauv(L, sizeof *w, 0);
  memset(w, 0, sizeof *w);
  luaL_setmetatable(L, KM_EWIN_MT);
  const char *why = NULL;
  int rc = lua_type(L, 1) == LUA_TSTRING ? km_nvml_device(lua_tostring(L, 1), 0, &d, &why)
                                         : km_nvml_device(NULL, (unsigned)luaL_optinteger(L, 1, 0), &d, &why);
  if (rc) { w->status = rc; w->why = why; return 1; } /* stop() reports it */
  km_energy_begin(w, d);
  return 1;
}

/* w:poll(calls_done) -> true when the counter moved */
static int l_window_poll(lua_State *L) {
  km_energy_window *w = luaL_checkudata(L, 1, KM_EWIN_MT);
  lua_pushboolean(L, km_energy_poll(w, luaL_checknumber(L, 2)));
  return 1;
}

/* w:stop() -> joules per call, span ms, calls | nil, why, code */
static int l_window_stop(lua_State *L) {
  km_energy_window *w = luaL_checkudata(L, 1, KM_EWIN_MT);
  double j = 0, ms = 0, calls = 0;
  const char *why = NULL;
  int rc = km_energy_end(w, &j, &ms, &calls, &why);
  if (rc) return km_fail(L, code_of(rc), "energy: %s", why);
  lua_pushnumber(L, j);
  lua_pushnumber(L, ms);
  lua_pushnumber(L, calls);
  return 3;
}

int luaopen_km_nvml(lua_State *L) {
  static const luaL_Reg wm[] = {{"poll", l_window_poll}, {"stop", l_window_stop}, {NULL, NULL}};
  km_newclass(L, KM_EWIN_MT, wm, NULL);
  static const luaL_Reg fns[] = {{"available", l_available}, {"load_ahead", l_load_ahead}, {"energy_mj", l_energy_mj}, {"memory", l_memory},
                                 {"sm_clock", l_sm_clock}, {"clocks", l_clocks}, {"window", l_window}, {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
