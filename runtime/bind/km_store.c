/* km_store.c — `require "km.store"`: the trajectory store for Lua (docs/store.md).
 *
 *   local db = assert(store.open("runs/sweep.db"))
 *   local run = db:begin_run{ name = "sweep", config = cfg }
 *   local ep  = db:begin_episode(run, { task = "l1_relu", strategy = "repair", model = m, rep = 1 })
 *   db:append(ep, "model_call", { tokens = 812 }, { duration_ms = 950.5 })   --> seq
 *   db:finish_episode(ep, "correct", { final = cand, summary = stats })
 *   db:export_jsonl("sft.jsonl", { status = "correct" })                       --> count
 *
 * This file translates between Lua and the pure C core (km_store_core.c): Lua tables are
 * stored as km.json text with sorted keys, and read back decoded. Failures SQLite reports
 * come back as nil, message, CODE ("SQLITE_BUSY", "SQLITE_CONSTRAINT", "NOT_FOUND", ...);
 * misuse (wrong argument types, a closed store, a payload JSON cannot hold) raises. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "km.h"
#include "km_json.h"
#include "km_store_core.h"
#include "km_lease_core.h"
#include "km_scrub_core.h"
#include "km_utf8_core.h"

#define KM_STORE_MT "km.Store"

/* Stored JSON: sorted keys so equal values give equal text; NaN/Inf as null because a
 * verdict with a NaN error must still be recorded, not raise in the middle of an episode. */
#define STORE_JSON (KM_JSON_SORT_KEYS | KM_JSON_NAN_NULL)

typedef struct {
  km_store *s; /* NULL once closed */
} store_ud;

static km_store *store_check(lua_State *L, int idx) {
  store_ud *u = luaL_checkudata(L, idx, KM_STORE_MT);
  if (!u->s) luaL_error(L, "attempt to use a closed km.Store");
  return u->s;
}

/* __gc, __close and :close(): one idempotent release. */
static int store_release(lua_State *L) {
  store_ud *u = luaL_checkudata(L, 1, KM_STORE_MT);
  km_store_close(u->s);
  u->s = NULL;
  return 0;
}

static int store_fail(lua_State *L, km_store *s) {
  return km_fail(L, km_store_errcode(s), "%s", km_store_errmsg(s));
}

/* Encodes the value of field `name` of the table at idx; leaves the text (or nothing) on
 * the stack, where it stays anchored until the function returns. NULL when absent. */
static const char *opt_json_field(lua_State *L, int idx, const char *name) {
  if (lua_isnoneornil(L, idx)) return NULL;
  luaL_checktype(L, idx, LUA_TTABLE);
  if (lua_getfield(L, idx, name) == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  km_json_push_encoded(L, -1, STORE_JSON);  /* [value, text] */
  lua_remove(L, -2);                        /* [text] */
  return lua_tostring(L, -1);
}

static void set_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static void set_num(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

static void set_int(lua_State *L, const char *k, long long v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}

/* Sets t[k] = decoded json (on the table at the top). 0 on success; on stored text that
 * does not parse, pushes nil, message, "CORRUPT" and returns 3. */
static int set_json(lua_State *L, const char *k, const char *json, size_t n, const char *where) {
  if (!json) return 0;
  if (km_json_push_decoded(L, json, n) == 3) {
    const char *why = lua_tostring(L, -2);
    return km_fail(L, "CORRUPT", "%s: stored %s is not valid JSON (%s)", where, k, why);
  }
  lua_setfield(L, -2, k);
  return 0;
}

/* ---- open / close ---- */

static int l_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int flags = 0;
  if (km_optfield_bool(L, 2, "readonly", 0)) flags |= KM_STORE_READONLY;
  const char *sync = km_optfield_str(L, 2, "synchronous", "normal");
  if (!strcmp(sync, "full")) flags |= KM_STORE_SYNC_FULL;
  else luaL_argcheck(L, !strcmp(sync, "normal"), 2, "option 'synchronous' must be \"normal\" or \"full\"");

  /* Closed userdata first, then the resource: a raise in between leaks nothing. */
  store_ud *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->s = NULL;
  luaL_setmetatable(L, KM_STORE_MT);
  km_store *s = NULL;
  int rc = km_store_open(path, flags, &s);
  u->s = s;
  if (rc != KM_OK) {
    if (!s) return km_fail(L, "SQLITE_NOMEM", "cannot open store %s: out of memory", path);
    store_fail(L, s);
    km_store_close(s);
    u->s = NULL;
    return 3;
  }
  return 1;
}

static int l_tostring(lua_State *L) {
  store_ud *u = luaL_checkudata(L, 1, KM_STORE_MT);
  if (u->s) lua_pushfstring(L, "km.Store (%s)", km_store_path(u->s));
  else lua_pushliteral(L, "km.Store (closed)");
  return 1;
}

/* ---- writers ---- */

static int l_begin_run(lua_State *L) {
  km_store *s = store_check(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  const char *name = km_optfield_str(L, 2, "name", NULL);
  const char *uuid = km_optfield_str(L, 2, "uuid", NULL);
  const char *config = opt_json_field(L, 2, "config");
  int64_t id;
  if (km_store_begin_run(s, name, config, uuid, &id)) return store_fail(L, s);
  lua_pushinteger(L, (lua_Integer)id);
  return 1;
}

static int l_finish_run(lua_State *L) {
  km_store *s = store_check(L, 1);
  lua_Integer run = luaL_checkinteger(L, 2);
  const char *status = luaL_optstring(L, 3, "done");
  if (km_store_finish_run(s, run, status)) return store_fail(L, s);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_begin_episode(lua_State *L) {
  km_store *s = store_check(L, 1);
  lua_Integer run = luaL_checkinteger(L, 2);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  km_store_episode_info info = {0};
  info.task = km_optfield_str(L, 3, "task", NULL);
  info.strategy = km_optfield_str(L, 3, "strategy", NULL);
  info.model = km_optfield_str(L, 3, "model", NULL);
  info.uuid = km_optfield_str(L, 3, "uuid", NULL);
  if (!lua_isnoneornil(L, 3)) {
    int has_seed = lua_getfield(L, 3, "seed") != LUA_TNIL;
    lua_pop(L, 1);
    luaL_argcheck(L, !has_seed, 3, "the repeat number is 'rep' (schema version 2), not 'seed'");
    info.has_rep = lua_getfield(L, 3, "rep") != LUA_TNIL;
    lua_pop(L, 1);
    info.rep = km_optfield_int(L, 3, "rep", 0);
  }
  int64_t id;
  if (km_store_begin_episode(s, run, &info, &id)) return store_fail(L, s);
  lua_pushinteger(L, (lua_Integer)id);
  return 1;
}

static int l_append(lua_State *L) {
  km_store *s = store_check(L, 1);
  lua_Integer ep = luaL_checkinteger(L, 2);
  const char *kind = luaL_checkstring(L, 3);
  luaL_checkany(L, 4);
  double started_at = km_optfield_num(L, 5, "started_at", -1);
  double duration_ms = km_optfield_num(L, 5, "duration_ms", -1);
  km_json_push_encoded(L, 4, STORE_JSON);
  int64_t seq;
  if (km_store_append(s, ep, kind, lua_tostring(L, -1), started_at, duration_ms, &seq))
    return store_fail(L, s);
  lua_pushinteger(L, (lua_Integer)seq);
  return 1;
}

static int l_finish_episode(lua_State *L) {
  km_store *s = store_check(L, 1);
  lua_Integer ep = luaL_checkinteger(L, 2);
  const char *status = luaL_checkstring(L, 3);
  const char *final = opt_json_field(L, 4, "final");
  const char *summary = opt_json_field(L, 4, "summary");
  if (km_store_finish_episode(s, ep, status, final, summary)) return store_fail(L, s);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_exec(lua_State *L) {
  km_store *s = store_check(L, 1);
  const char *sql = luaL_checkstring(L, 2);
  char first[1024];
  int has_row;
  if (km_store_exec(s, sql, first, sizeof first, &has_row)) return store_fail(L, s);
  if (has_row) lua_pushstring(L, first);
  else lua_pushboolean(L, 1);
  return 1;
}

/* ---- leases (km_lease_core.h) ---- */

/* Pushes a lease as a table: { run_id, episode_id, host, pid, state, status, taken_at,
 * expires_at, done_at, alive }. */
static void push_lease(lua_State *L, const km_lease *l) {
  lua_createtable(L, 0, 10);
  lua_pushinteger(L, (lua_Integer)l->run_id);
  lua_setfield(L, -2, "run_id");
  if (l->episode_id > 0) {
    lua_pushinteger(L, (lua_Integer)l->episode_id);
    lua_setfield(L, -2, "episode_id");
  }
  if (l->host[0]) {
    lua_pushstring(L, l->host);
    lua_setfield(L, -2, "host");
  }
  lua_pushinteger(L, (lua_Integer)l->pid);
  lua_setfield(L, -2, "pid");
  lua_pushstring(L, l->state);
  lua_setfield(L, -2, "state");
  if (l->status[0]) {
    lua_pushstring(L, l->status);
    lua_setfield(L, -2, "status");
  }
  lua_pushnumber(L, l->taken_at);
  lua_setfield(L, -2, "taken_at");
  lua_pushnumber(L, l->expires_at);
  lua_setfield(L, -2, "expires_at");
  if (l->done_at > 0) {
    lua_pushnumber(L, l->done_at);
    lua_setfield(L, -2, "done_at");
  }
  lua_pushboolean(L, l->alive);
  lua_setfield(L, -2, "alive");
}

/* db:claim(key, run_id [, { seen = episode_id, ttl = seconds, redo = "a,b" }]) -> "taken" |
 * "held", lease | "done", lease */
static int l_claim(lua_State *L) {
  km_store *s = store_check(L, 1);
  const char *key = luaL_checkstring(L, 2);
  lua_Integer run = luaL_checkinteger(L, 3);
  if (!lua_isnoneornil(L, 4)) luaL_checktype(L, 4, LUA_TTABLE);
  lua_Integer seen = km_optfield_int(L, 4, "seen", 0);
  double ttl = km_optfield_num(L, 4, "ttl", 120);
  const char *redo = km_optfield_str(L, 4, "redo", NULL);
  luaL_argcheck(L, ttl > 0, 4, "ttl must be positive");
  int result;
  km_lease holder;
  if (km_lease_claim(s, key, run, seen, ttl, redo, &result, &holder)) return store_fail(L, s);
  static const char *const names[] = {"taken", "held", "done"};
  lua_pushstring(L, names[result]);
  if (result == KM_LEASE_TAKEN) return 1;
  push_lease(L, &holder);
  return 2;
}

static int l_bind_lease(lua_State *L) {
  km_store *s = store_check(L, 1);
  if (km_lease_bind(s, luaL_checkstring(L, 2), luaL_checkinteger(L, 3), luaL_checkinteger(L, 4)))
    return store_fail(L, s);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_drop_lease(lua_State *L) {
  km_store *s = store_check(L, 1);
  if (km_lease_drop(s, luaL_checkstring(L, 2), luaL_checkinteger(L, 3))) return store_fail(L, s);
  lua_pushboolean(L, 1);
  return 1;
}

/* db:renew_leases(run_id [, ttl]) -> the number renewed */
static int l_renew_leases(lua_State *L) {
  km_store *s = store_check(L, 1);
  lua_Integer run = luaL_checkinteger(L, 2);
  double ttl = luaL_optnumber(L, 3, 120);
  luaL_argcheck(L, ttl > 0, 3, "ttl must be positive");
  int n = 0;
  if (km_lease_renew(s, run, ttl, &n)) return store_fail(L, s);
  lua_pushinteger(L, n);
  return 1;
}

/* db:abandon(episode_id, key [, summary]) -> whether it was marked abandoned (only while it
 * runs and no live lease names it) */
static int l_abandon(lua_State *L) {
  km_store *s = store_check(L, 1);
  lua_Integer ep = luaL_checkinteger(L, 2);
  const char *key = luaL_checkstring(L, 3);
  const char *summary = NULL;
  if (!lua_isnoneornil(L, 4)) {
    km_json_push_encoded(L, 4, STORE_JSON);
    summary = lua_tostring(L, -1);
  }
  int abandoned;
  if (km_lease_abandon(s, key, ep, summary, &abandoned)) return store_fail(L, s);
  lua_pushboolean(L, abandoned);
  return 1;
}

/* db:lease(key) -> lease table, or false when the key has none */
static int l_lease(lua_State *L) {
  km_store *s = store_check(L, 1);
  km_lease l;
  int found;
  if (km_lease_get(s, luaL_checkstring(L, 2), &l, &found)) return store_fail(L, s);
  if (found) push_lease(L, &l);
  else lua_pushboolean(L, 0);
  return 1;
}

/* ---- readers ---- */

/* Pushes an episode's row as a table (no steps); 1, or 3 after pushing a failure. */
static int push_episode(lua_State *L, const km_store_episode *e) {
  char where[48];
  snprintf(where, sizeof where, "episode %lld", (long long)e->id);
  lua_createtable(L, 0, 14);
  set_int(L, "id", e->id);
  set_int(L, "run_id", e->run_id);
  set_str(L, "uuid", e->uuid);
  set_str(L, "task", e->task);
  set_str(L, "strategy", e->strategy);
  set_str(L, "model", e->model);
  if (e->has_rep) set_int(L, "rep", e->rep);
  set_num(L, "started_at", e->started_at);
  if (e->has_finished) set_num(L, "finished_at", e->finished_at);
  set_str(L, "status", e->status);
  if (set_json(L, "final", e->final_json, e->final_json ? strlen(e->final_json) : 0, where)) return 3;
  if (set_json(L, "summary", e->summary_json, e->summary_json ? strlen(e->summary_json) : 0, where))
    return 3;
  return 1;
}

static int l_episode(lua_State *L) {
  km_store *s = store_check(L, 1);
  lua_Integer id = luaL_checkinteger(L, 2);
  km_store_episode e;
  if (km_store_get_episode(s, id, &e)) return store_fail(L, s);
  if (push_episode(L, &e) == 3) return 3;                  /* [ep] */
  if (km_store_steps_query(s, id)) return store_fail(L, s);
  lua_newtable(L);                                         /* [ep, steps] */
  km_store_step st;
  int rc, n = 0;
  while ((rc = km_store_steps_next(s, &st)) == 1) {
    lua_createtable(L, 0, 5);                              /* [ep, steps, step] */
    set_int(L, "seq", st.seq);
    set_str(L, "kind", st.kind);
    char where[64];
    snprintf(where, sizeof where, "episode %lld step %lld", (long long)id, (long long)st.seq);
    if (set_json(L, "payload", st.payload_json, st.payload_len, where)) {
      km_store_steps_query(s, id); /* resets the cursor: no read lock left behind */
      return 3;
    }
    set_num(L, "started_at", st.started_at);
    if (st.has_duration) set_num(L, "duration_ms", st.duration_ms);
    lua_rawseti(L, -2, ++n);
  }
  if (rc < 0) return store_fail(L, s);
  lua_setfield(L, -2, "steps");                            /* [ep] */
  return 1;
}

/* Whether the optional table at idx asks readers to leave out rows whose stored JSON does
 * not parse (a hand-edited or damaged store) instead of failing the whole listing. */
static int opt_skip_corrupt(lua_State *L, int idx) {
  return lua_istable(L, idx) && km_optfield_bool(L, idx, "skip_corrupt", 0);
}

/* After push_*() failed with [.., nil, message, code] above `top`: keeps the message in the
 * list of left-out rows (table at `skipped`) and restores the stack to `top`. */
static void note_skipped(lua_State *L, int top, int skipped, lua_Integer id) {
  lua_createtable(L, 0, 2);                                 /* [.., nil, msg, code, t] */
  set_int(L, "id", id);
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "message");
  lua_rawseti(L, skipped, (lua_Integer)lua_rawlen(L, skipped) + 1);
  lua_settop(L, top);
}

static int l_episodes(lua_State *L) {
  km_store *s = store_check(L, 1);
  km_store_filter f = {0};
  int skip = opt_skip_corrupt(L, 2);
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "run_id") != LUA_TNIL) {
      f.has_run_id = 1;
      f.run_id = km_optfield_int(L, 2, "run_id", 0);
    }
    lua_pop(L, 1);
    f.task = km_optfield_str(L, 2, "task", NULL);
    f.status = km_optfield_str(L, 2, "status", NULL);
  }
  if (km_store_episodes_query(s, &f)) return store_fail(L, s);
  lua_newtable(L);                                         /* [.., list] */
  lua_newtable(L);                                         /* [.., list, skipped] */
  int skipped = lua_gettop(L);
  km_store_episode e;
  int rc, n = 0;
  while ((rc = km_store_episodes_next(s, &e)) == 1) {
    int top = lua_gettop(L);
    if (push_episode(L, &e) == 3) {
      if (!skip) {
        km_store_episodes_query(s, &f); /* resets the cursor: no read lock left behind */
        return 3;
      }
      note_skipped(L, top, skipped, e.id);
      continue;
    }
    lua_rawseti(L, skipped - 1, ++n);
  }
  if (rc < 0) return store_fail(L, s);
  return skip ? 2 : (lua_pop(L, 1), 1);
}

static int l_runs(lua_State *L) {
  km_store *s = store_check(L, 1);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  int skip = opt_skip_corrupt(L, 2);
  if (km_store_runs_query(s)) return store_fail(L, s);
  lua_newtable(L);                                         /* [.., list] */
  lua_newtable(L);                                         /* [.., list, skipped] */
  int skipped = lua_gettop(L);
  km_store_run r;
  int rc, n = 0;
  while ((rc = km_store_runs_next(s, &r)) == 1) {
    int top = lua_gettop(L);
    lua_createtable(L, 0, 9);
    set_int(L, "id", r.id);
    set_str(L, "uuid", r.uuid);
    set_str(L, "name", r.name);
    set_num(L, "started_at", r.started_at);
    if (r.has_finished) set_num(L, "finished_at", r.finished_at);
    set_str(L, "status", r.status);
    char where[32];
    snprintf(where, sizeof where, "run %lld", (long long)r.id);
    if (set_json(L, "config", r.config_json, r.config_json ? strlen(r.config_json) : 0, where)) {
      if (!skip) {
        km_store_runs_query(s);
        return 3;
      }
      note_skipped(L, top, skipped, r.id);
      continue;
    }
    set_str(L, "host", r.host);
    set_str(L, "kmrun_version", r.kmrun_version);
    lua_rawseti(L, skipped - 1, ++n);
  }
  if (rc < 0) return store_fail(L, s);
  return skip ? 2 : (lua_pop(L, 1), 1);
}

/* db:check() -> true | nil, message, "CORRUPT": SQLite's quick_check reads every page and
 * checks the b-trees, so a damaged file is refused before a command prints half its output
 * (reading fails midway otherwise, or never, when the damage is in rows not read). */
static int l_check(lua_State *L) {
  km_store *s = store_check(L, 1);
  char first[512];
  int has_row;
  if (km_store_exec(s, "PRAGMA quick_check", first, sizeof first, &has_row)) return store_fail(L, s);
  if (has_row && strcmp(first, "ok") != 0) return km_fail(L, "CORRUPT", "damaged (%s)", first);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- export: one JSON object per episode, written around the stored JSON text ---- */

static void add_key(luaL_Buffer *b, const char *k, int first) {
  if (!first) luaL_addchar(b, ',');
  luaL_addchar(b, '"');
  luaL_addstring(b, k);
  luaL_addstring(b, "\":");
}

static void add_str_or_null(luaL_Buffer *b, const char *v) {
  if (v) km_json_add_string(b, v, strlen(v));
  else luaL_addstring(b, "null");
}

/* The stored text was written by km.json, so it is spliced in as it is, but for any byte that
 * is not valid UTF-8 (text a store got before km.json replaced such bytes): invalid bytes can
 * stand only inside a JSON string, where \ufffd is what json.encode writes for each. */
static void add_raw_or_null(luaL_Buffer *b, const char *v, size_t n) {
  if (!v) {
    luaL_addstring(b, "null");
    return;
  }
  size_t len = km_utf8_repaired_len(v, n);
  km_utf8_repair(luaL_prepbuffsize(b, len), v, n);
  luaL_addsize(b, len);
}

/* Appends the episode as one line of JSON, keys in the order json.encode sorts them, so a
 * line is byte for byte json.encode of the decoded line. Only buffer operations run here
 * (luaL_Buffer needs a balanced stack). Returns 0 or the core's negative status. */
static int add_episode_json(luaL_Buffer *b, km_store *s, const km_store_episode *e) {
  add_key(b, "final", 1);
  add_raw_or_null(b, e->final_json, e->final_json ? strlen(e->final_json) : 0);
  add_key(b, "finished_at", 0);
  if (e->has_finished) km_json_add_float(b, e->finished_at);
  else luaL_addstring(b, "null");
  add_key(b, "id", 0);
  km_json_add_integer(b, e->id);
  add_key(b, "model", 0);
  add_str_or_null(b, e->model);
  add_key(b, "rep", 0);
  if (e->has_rep) km_json_add_integer(b, e->rep);
  else luaL_addstring(b, "null");
  add_key(b, "run_id", 0);
  km_json_add_integer(b, e->run_id);
  add_key(b, "started_at", 0);
  km_json_add_float(b, e->started_at);
  add_key(b, "status", 0);
  add_str_or_null(b, e->status);
  add_key(b, "steps", 0);
  luaL_addchar(b, '[');
  int rc = km_store_steps_query(s, e->id);
  if (rc) return rc;
  km_store_step st;
  int n = 0;
  while ((rc = km_store_steps_next(s, &st)) == 1) {
    if (n++) luaL_addchar(b, ',');
    luaL_addchar(b, '{');
    add_key(b, "duration_ms", 1);
    if (st.has_duration) km_json_add_float(b, st.duration_ms);
    else luaL_addstring(b, "null");
    add_key(b, "kind", 0);
    add_str_or_null(b, st.kind);
    add_key(b, "payload", 0);
    add_raw_or_null(b, st.payload_json, st.payload_len);
    add_key(b, "seq", 0);
    km_json_add_integer(b, st.seq);
    add_key(b, "started_at", 0);
    km_json_add_float(b, st.started_at);
    luaL_addchar(b, '}');
  }
  if (rc < 0) return rc;
  luaL_addchar(b, ']');
  add_key(b, "strategy", 0);
  add_str_or_null(b, e->strategy);
  add_key(b, "summary", 0);
  add_raw_or_null(b, e->summary_json, e->summary_json ? strlen(e->summary_json) : 0);
  add_key(b, "task", 0);
  add_str_or_null(b, e->task);
  add_key(b, "uuid", 0);
  add_str_or_null(b, e->uuid);
  return 0;
}

/* Pushes the episode's JSON line (no newline); returns 0 or the core's status. Exports
 * leave the machine: the line has this process's secrets replaced (km_scrub_core.h), which
 * also covers a store written by a process that did not know them. */
static int push_episode_json(lua_State *L, km_store *s, const km_store_episode *e) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '{');
  int rc = add_episode_json(&b, s, e);
  luaL_addchar(&b, '}');
  luaL_pushresult(&b);
  if (rc) {
    lua_pop(L, 1);
    return rc;
  }
  size_t n;
  const char *line = lua_tolstring(L, -1, &n); /* [line] */
  char *dst = luaL_buffinitsize(L, &b, km_scrub_bound(n));
  luaL_pushresultsize(&b, km_scrub_to(line, n, dst, NULL)); /* [line, clean] */
  lua_remove(L, -2);
  return 0;
}

static int l_export_episode(lua_State *L) {
  km_store *s = store_check(L, 1);
  lua_Integer id = luaL_checkinteger(L, 2);
  km_store_episode e;
  if (km_store_get_episode(s, id, &e)) return store_fail(L, s);
  if (push_episode_json(L, s, &e)) return store_fail(L, s);
  return 1;
}

/* A luaL_Stream's close function (liolib's protocol): used for the file export_jsonl
 * opens itself, so that io's __gc closes it if a raise comes first. */
static int export_file_close(lua_State *L) {
  luaL_Stream *p = luaL_checkudata(L, 1, LUA_FILEHANDLE);
  return luaL_fileresult(L, fclose(p->f) == 0, NULL);
}

static int filter_matches(const km_store_filter *f, const km_store_episode *e) {
  if (f->has_run_id && e->run_id != f->run_id) return 0;
  if (f->task && (!e->task || strcmp(f->task, e->task))) return 0;
  if (f->status && (!e->status || strcmp(f->status, e->status))) return 0;
  return 1;
}

/* Writes the episode's line; 0, a negative core status, or 1 for a write error (errno). */
static int write_episode(lua_State *L, km_store *s, const km_store_episode *e, FILE *f) {
  int rc = push_episode_json(L, s, e);
  if (rc) return rc;
  size_t n;
  const char *line = lua_tolstring(L, -1, &n);
  int bad = fwrite(line, 1, n, f) != n || fputc('\n', f) == EOF;
  lua_pop(L, 1);
  return bad;
}

/* db:export_jsonl([path | file], [filter]) -> count. A path is written through a temporary
 * file renamed into place at the end, so a reader never sees half an export. */
static int l_export_jsonl(lua_State *L) {
  km_store *s = store_check(L, 1);
  const char *path = NULL;
  FILE *f = stdout;
  if (lua_type(L, 2) == LUA_TSTRING) {
    path = lua_tostring(L, 2);
  } else if (!lua_isnoneornil(L, 2)) {
    luaL_Stream *p = luaL_testudata(L, 2, LUA_FILEHANDLE);
    luaL_argcheck(L, p != NULL, 2, "expected a path or a file handle");
    if (!p->closef) luaL_error(L, "attempt to use a closed file");
    f = p->f;
  }
  km_store_filter flt = {0};
  int one = 0;
  lua_Integer one_id = 0;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    if (lua_getfield(L, 3, "run_id") != LUA_TNIL) {
      flt.has_run_id = 1;
      flt.run_id = km_optfield_int(L, 3, "run_id", 0);
    }
    if (lua_getfield(L, 3, "episode_id") != LUA_TNIL) {
      one = 1;
      one_id = km_optfield_int(L, 3, "episode_id", 0);
    }
    lua_pop(L, 2);
    flt.task = km_optfield_str(L, 3, "task", NULL);
    flt.status = km_optfield_str(L, 3, "status", NULL);
  }
  lua_settop(L, 3);

  char tmp[4200];
  luaL_Stream *own = NULL;
  if (path) {
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    own = lua_newuserdatauv(L, sizeof *own, 0);   /* [.., stream] closed until opened */
    own->closef = NULL;
    luaL_setmetatable(L, LUA_FILEHANDLE);
    own->f = fopen(tmp, "w");
    if (!own->f) return km_fail(L, "IO_ERROR", "cannot write %s: %s", tmp, strerror(errno));
    own->closef = export_file_close;
    f = own->f;
  }

  lua_Integer count = 0;
  int rc = 0;
  km_store_episode e;
  if (one) {
    rc = km_store_get_episode(s, one_id, &e);
    if (rc == KM_ENOTFOUND) rc = 0;
    else if (rc == 0 && filter_matches(&flt, &e) && (rc = write_episode(L, s, &e, f)) == 0) count++;
  } else if ((rc = km_store_episodes_query(s, &flt)) == 0) {
    int more;
    while ((more = km_store_episodes_next(s, &e)) == 1 && (rc = write_episode(L, s, &e, f)) == 0)
      count++;
    if (more < 0) rc = more;
  }
  int err = errno;
  if (own) {
    own->closef = NULL;  /* closed here: io's __gc must not close it again */
    if (fclose(own->f) != 0 && rc == 0) {
      rc = 1;
      err = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
      remove(tmp);
      return km_fail(L, "IO_ERROR", "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    if (rc != 0) remove(tmp);
  }
  if (rc == 1) return km_fail(L, "IO_ERROR", "writing %s: %s", path ? path : "the export", strerror(err));
  if (rc) return store_fail(L, s);
  lua_pushinteger(L, count);
  return 1;
}

/* ---- module ---- */

int luaopen_km_store(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"begin_run", l_begin_run},
      {"finish_run", l_finish_run},
      {"begin_episode", l_begin_episode},
      {"append", l_append},
      {"finish_episode", l_finish_episode},
      {"episode", l_episode},
      {"episodes", l_episodes},
      {"runs", l_runs},
      {"export_jsonl", l_export_jsonl},
      {"export_episode", l_export_episode},
      {"exec", l_exec},
      {"claim", l_claim},
      {"bind_lease", l_bind_lease},
      {"drop_lease", l_drop_lease},
      {"renew_leases", l_renew_leases},
      {"lease", l_lease},
      {"abandon", l_abandon},
      {"check", l_check},
      {"close", store_release},
      {NULL, NULL}};
  km_newclass(L, KM_STORE_MT, methods, store_release);
  luaL_getmetatable(L, KM_STORE_MT);
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {{"open", l_open}, {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushinteger(L, KM_STORE_SCHEMA_VERSION);
  lua_setfield(L, -2, "schema_version");
  return 1;
}
