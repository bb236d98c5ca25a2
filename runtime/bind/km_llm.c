/* km_llm.c — `require "km.llm"`: the model client (docs/llm.md).
 *
 *   local c = llm.new { model = "m", budget = { requests = 100 } }  -- env fills the rest
 *   local reply, msg, code = c:chat(messages, { temperature = 0.7, max_tokens = 2048 })
 *   local entries = c:chat_many({ msgs1, msgs2, msgs3 }, opts) -- concurrent, in order
 *   local req = c:start(messages, opts)       -- at once; c:poll(ms) hands back finished ones
 *   c:pending()   c:usage()   c:config()   c:close()
 *   llm.providers()                           -- the providers' table, a row each
 *
 * Providers are rows of km_llm_providers[] (km_llm_core.c): this file reads a client's row
 * (its variables, URLs, headers, flags, body and parse functions) and names no provider.
 * Requests (OpenAI chat completions, Anthropic Messages) go through the client's transfer
 * engine (km_llm_xfer_core.c: libcurl's multi interface, plain C): every HTTP attempt of a
 * client (all n of a call, all entries of chat_many, every request started and not yet
 * polled, their retries) runs in one event loop, so N candidates cost the time of the
 * slowest, not the sum. chat is start plus "turn the loop until it is done". The JSON both
 * ways and the retry policy are pure C in km_llm_core.c; this file translates Lua tables,
 * keeps the requests and the budget, and replays recorded replies.
 *
 * Ownership: a km.llm.Client owns its transfer engine (the curl multi handle and the header
 * list) and copies of its configuration strings (the API key among them; it is wiped when freed and never handed
 * back to Lua). Everything one request allocates (easy handles, request and response bodies,
 * parsed replies) is owned by its km.llm.Request userdata, so a raise while it is built
 * frees it; the client pins its requests until poll or chat hands them back (which frees
 * that memory at once) and aborts them when it is closed or collected. Transfers stay open
 * between Lua calls, but curl only runs inside the engine's turns (km_llm_xfer_step and
 * _drive, called from start, poll and chat), never while Lua does. */
#define _GNU_SOURCE /* explicit_bzero */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_json.h"
#include "km_llm_core.h"
#include "km_llm_xfer_core.h"
#include "km_scrub_core.h"
#include "km_signal.h"

#define KM_LLM_MT "km.llm.Client"
#define REQUEST_MT "km.llm.Request"

#define MAX_N 128                 /* choices per call */

/* uservalues of a client */
enum { UV_PRICES = 1, UV_REPLIES = 2, UV_INFLIGHT = 3 };

typedef struct request request;

typedef struct {
  int open;
  km_llm_api api;              /* the provider's row */
  const km_llm_provider *p;    /* &km_llm_providers[api] */
  char *base_url, *api_key, *model, *version; /* malloc'd; NULL if none */
  km_llm_xfer x;               /* the transfer engine: URL, headers, limits, the multi handle
                                  that keeps connections alive between calls (none: replay
                                  and offline clients) */
  km_llm_budget budget;
  km_llm_spent spent;          /* requests, tokens, dollars: what the budget is held to */
  long long prompt_tokens, completion_tokens, failures;
  lua_Integer replay_next;     /* 1-based index of the next recorded reply */
  request *head, *tail;        /* started requests not yet handed back, in start order */
  lua_Integer next_id;         /* the last request id given out */
  size_t n_pending;            /* length of that list */
} client;

static void request_release(request *r);
static void job_done(km_llm_job *j);

static void free_str(char **s, int wipe) {
  if (*s && wipe) explicit_bzero(*s, strlen(*s));
  free(*s);
  *s = NULL;
}

/* ---- the client's lifetime ---- */

static client *client_check(lua_State *L, int idx) {
  client *c = luaL_checkudata(L, idx, KM_LLM_MT);
  if (!c->open) luaL_error(L, "attempt to use a closed km.llm.Client");
  return c;
}

/* __gc, __close and :close(): one idempotent release. */
static int client_release(lua_State *L) {
  client *c = luaL_checkudata(L, 1, KM_LLM_MT);
  /* Requests in flight first: their easy handles must leave the multi handle before it goes. */
  while (c->head) request_release(c->head);
  if (c->open) {
    lua_pushnil(L); /* the handles stay valid for whoever holds them, as finished shells */
    lua_setiuservalue(L, 1, UV_INFLIGHT);
  }
  km_llm_xfer_close(&c->x); /* the multi handle, the URL, the (wiped) headers */
  free_str(&c->base_url, 0);
  free_str(&c->api_key, 1);
  free_str(&c->model, 0);
  free_str(&c->version, 0);
  c->open = 0;
  return 0;
}

/* A string from cfg[field], else the environment variable (empty counts as unset). */
static const char *cfg_or_env(lua_State *L, int idx, const char *field, const char *env) {
  const char *v = km_optfield_str(L, idx, field, NULL);
  if (v) return v;
  v = env ? getenv(env) : NULL;
  return v && *v ? v : NULL;
}

static int env_set(const char *name) {
  const char *v = name ? getenv(name) : NULL;
  return v && *v;
}

/* The first row with one of these flags, or -1. */
static int row_with(unsigned flags) {
  for (size_t i = 0; i < km_llm_n_providers; i++)
    if (km_llm_providers[i].flags & flags) return (int)i;
  return -1;
}

/* cfg.provider's row, else the row the rules of km_llm_core.h pick: replies, then the
 * environment (rows in table order), then a model or server named, then the fallback. */
static km_llm_api pick_provider(lua_State *L, int cfg) {
  const char *name = km_optfield_str(L, cfg, "provider", NULL);
  if (name) {
    int i = km_llm_provider_find(name);
    if (i < 0) {
      char list[256];
      km_llm_provider_list(0, list, sizeof list);
      luaL_error(L, "km.llm: unknown provider '%s' (%s)", name, list);
    }
    return (km_llm_api)i;
  }
  int has_replies = 0;
  if (!lua_isnoneornil(L, cfg)) {
    has_replies = lua_getfield(L, cfg, "replies") != LUA_TNIL;
    lua_pop(L, 1);
  }
  int i = has_replies ? row_with(KM_LLM_REPLAYS) : -1;
  for (size_t k = 0; i < 0 && k < km_llm_n_providers; k++) {
    const km_llm_provider *p = &km_llm_providers[k];
    if (((p->flags & KM_LLM_PICK_KEY) && env_set(p->key_env)) ||
        ((p->flags & KM_LLM_PICK_URL) && env_set(p->url_env)))
      i = (int)k;
  }
  if (i < 0 && (env_set("KM_MODEL") || km_optfield_str(L, cfg, "base_url", NULL) ||
                km_optfield_str(L, cfg, "api_key", NULL) || km_optfield_str(L, cfg, "model", NULL)))
    i = row_with(KM_LLM_PICK_NAMED);
  if (i < 0) i = row_with(KM_LLM_FALLBACK);
  if (i < 0) luaL_error(L, "km.llm: no provider to fall back on"); /* a table without one */
  return (km_llm_api)i;
}

static char *xstrdup(lua_State *L, const char *s) {
  if (!s) return NULL;
  char *p = strdup(s);
  if (!p) luaL_error(L, "km.llm: out of memory");
  return p;
}

/* Pushes a provider's URL for a base (km_llm_url). */
static const char *push_url(lua_State *L, km_llm_api api, const char *base, const char *path,
                            int whole) {
  size_t n = km_llm_url(api, base, path, whole, NULL, 0);
  luaL_Buffer b;
  char *dst = luaL_buffinitsize(L, &b, n + 1);
  km_llm_url(api, base, path, whole, dst, n + 1);
  luaL_pushresultsize(&b, n);
  return lua_tostring(L, -1);
}

/* Appends "name: prefix value" to the engine's headers (the line may hold the key: the
 * engine wipes its copies). */
static void add_header(lua_State *L, client *c, const char *name, const char *prefix,
                       const char *value) {
  if (km_llm_xfer_header(&c->x, name, prefix, value)) luaL_error(L, "km.llm: out of memory");
}

static double positive(lua_State *L, int cfg, const char *field, double def, int allow_zero) {
  double v = km_optfield_num(L, cfg, field, def);
  if (!(allow_zero ? v >= 0 : v > 0) || !isfinite(v))
    luaL_error(L, "km.llm: option '%s' must be a %s number", field,
               allow_zero ? "non-negative" : "positive");
  return v;
}

/* The config's budget: requests, tokens, dollars (-1: no limit). Leaves [cfg]. */
static km_llm_budget read_budget(lua_State *L, int cfg) {
  km_llm_budget budget = {-1, -1, -1};
  if (!lua_isnoneornil(L, cfg) && lua_getfield(L, cfg, "budget") != LUA_TNIL) {
    luaL_argcheck(L, lua_istable(L, -1), cfg, "budget must be a table");
    budget.requests = km_optfield_int(L, -1, "requests", -1);
    budget.tokens = km_optfield_int(L, -1, "tokens", -1);
    budget.dollars = km_optfield_num(L, -1, "dollars", -1);
  }
  lua_settop(L, 1);
  return budget;
}

/* [cfg] -> [cfg, prices]: the config's prices, checked now, so a typo shows at new() and not
 * as a silent zero cost later. */
static void push_prices(lua_State *L, int cfg) {
  lua_newtable(L); /* [cfg, prices] */
  if (!lua_isnoneornil(L, cfg) && lua_getfield(L, cfg, "prices") != LUA_TNIL) {
    luaL_argcheck(L, lua_istable(L, -1), cfg, "prices must be a table { [model] = { input =, output = } }");
    lua_pushnil(L); /* [cfg, prices, src, k] */
    while (lua_next(L, -2)) {
      if (lua_type(L, -2) != LUA_TSTRING || !lua_istable(L, -1))
        luaL_error(L, "km.llm: prices must map model names to { input =, output = }");
      double in = km_optfield_num(L, -1, "input", 0), out = km_optfield_num(L, -1, "output", 0);
      if (!(in >= 0) || !(out >= 0)) luaL_error(L, "km.llm: prices must be non-negative");
      lua_pop(L, 1);
      lua_pushvalue(L, -1); /* [.., k, k] */
      lua_createtable(L, 0, 2);
      lua_pushnumber(L, in);
      lua_setfield(L, -2, "input");
      lua_pushnumber(L, out);
      lua_setfield(L, -2, "output");
      lua_settable(L, 2);
    }
  }
  lua_settop(L, 2);
}

/* [cfg, prices] -> [cfg, prices, replies]: the recorded replies a replay client plays ({}). */
static void push_replies(lua_State *L, int cfg) {
  if (!lua_isnoneornil(L, cfg)) lua_getfield(L, cfg, "replies"); /* [cfg, prices, replies] */
  else lua_pushnil(L);
  if (lua_isnil(L, 3)) {
    lua_pop(L, 1);
    lua_newtable(L);
  }
  luaL_argcheck(L, lua_istable(L, 3), cfg, "replies must be a list of reply tables");
}

/* An HTTP provider's side of a new client: its URL, key, headers and transfer engine (the
 * engine's limits are already set). */
static void open_http(lua_State *L, client *c, const char *base, const char *key, const char *version) {
  const km_llm_provider *pv = c->p;
  c->base_url = xstrdup(L, base);
  c->api_key = xstrdup(L, key);
  c->version = xstrdup(L, version);
  km_llm_xfer limits = c->x;
  if (km_llm_xfer_open(&c->x, c->api, push_url(L, c->api, base, pv->path, 1)))
    luaL_error(L, "km.llm: cannot create a curl multi handle");
  lua_pop(L, 1);
  c->x.timeout = limits.timeout, c->x.connect_timeout = limits.connect_timeout;
  c->x.backoff_base = limits.backoff_base, c->x.max_retries = limits.max_retries;
  c->x.has_key = key != NULL;
  c->x.stop = &km_signal_caught;
  c->x.on_done = job_done;
  add_header(L, c, "Content-Type", "", "application/json");
  add_header(L, c, "Accept", "", "application/json");
  /* "Expect:" with no value: otherwise curl waits up to a second for "100 Continue"
   * before sending a large body, and plain HTTP/1.0 servers never send one. */
  add_header(L, c, "Expect", "", "");
  if (pv->version_header && version) add_header(L, c, pv->version_header, "", version);
  if (key && pv->auth_header) add_header(L, c, pv->auth_header, pv->auth_prefix, key);
}

static int l_new(lua_State *L) {
  const int cfg = 1;
  if (!lua_isnoneornil(L, cfg)) luaL_checktype(L, cfg, LUA_TTABLE);
  lua_settop(L, 1);
  km_llm_api api = pick_provider(L, cfg);
  const km_llm_provider *pv = &km_llm_providers[api];
  const char *base = cfg_or_env(L, cfg, "base_url", pv->url_env);
  if (!base) base = pv->base_url;
  const char *key = cfg_or_env(L, cfg, "api_key", pv->key_env);
  if (key && !*key) key = NULL; /* api_key = "": no key, whatever the environment says */
  /* The key joins the process's secrets: scrubbed from logs, the store, request bodies and
   * exports from now on (km_scrub_core.h), not only from this client's replies. */
  if (key && km_scrub_add(key, strlen(key))) return luaL_error(L, "km.llm: out of memory");
  const char *model = cfg_or_env(L, cfg, "model", "KM_MODEL");
  const char *version =
      pv->version_field ? km_optfield_str(L, cfg, pv->version_field, pv->version_default) : NULL;
  double timeout = positive(L, cfg, "timeout", 600, 0);
  double connect_timeout = positive(L, cfg, "connect_timeout", 10, 0);
  double backoff = positive(L, cfg, "backoff_base", 1, 1);
  lua_Integer retries = km_optfield_int(L, cfg, "max_retries", 4);
  luaL_argcheck(L, retries >= 0 && retries <= 100, cfg, "max_retries must be 0..100");

  km_llm_budget budget = read_budget(L, cfg);
  push_prices(L, cfg);  /* [cfg, prices] */
  push_replies(L, cfg); /* [cfg, prices, replies] */

  /* Closed userdata first, then the resources: a raise in between leaks nothing. */
  client *c = lua_newuserdatauv(L, sizeof *c, 3); /* [cfg, prices, replies, c] */
  memset(c, 0, sizeof *c);
  luaL_setmetatable(L, KM_LLM_MT);
  lua_newtable(L); /* id -> km.llm.Request: pins every request until it is handed back */
  lua_setiuservalue(L, -2, UV_INFLIGHT);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, UV_PRICES);
  lua_pushvalue(L, 3);
  lua_setiuservalue(L, -2, UV_REPLIES);
  c->open = 1;
  c->api = api;
  c->p = pv;
  km_llm_xfer_open(&c->x, api, NULL); /* no URL: allocates nothing */
  c->x.timeout = timeout;
  c->x.connect_timeout = connect_timeout;
  c->x.backoff_base = backoff;
  c->x.max_retries = (int)retries;
  c->budget = budget;
  c->replay_next = 1;
  c->model = xstrdup(L, model);
  if (pv->body) open_http(L, c, base, key, version); /* a provider that talks HTTP */
  return 1;
}

/* ---- reading calls' arguments ---- */

/* Everything a call reads from Lua is anchored in one table at a fixed stack index, so
 * the C pointers into it stay valid whatever metamethods the caller's tables have. */
typedef struct {
  lua_State *L;
  int idx;        /* the anchor table */
  lua_Integer n;  /* entries so far */
} anchor;

static const char *anchor_top(anchor *a) { /* pops the value at the top, keeps it */
  const char *s = lua_tostring(a->L, -1);
  lua_rawseti(a->L, a->idx, ++a->n);
  return s;
}

static void *anchored_array(anchor *a, size_t count, size_t size) {
  void *p = lua_newuserdatauv(a->L, count ? count * size : 1, 0);
  memset(p, 0, count ? count * size : 1);
  lua_rawseti(a->L, a->idx, ++a->n);
  return p;
}

/* t[field] of the table at idx as an anchored string; NULL when nil. Raises otherwise;
 * `what` names the table in the message ("message 3", "tool 1", "option"). */
static const char *field_str(anchor *a, int idx, const char *field, const char *what) {
  lua_State *L = a->L;
  int t = lua_getfield(L, idx, field);
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  if (t != LUA_TSTRING)
    luaL_error(L, "km.llm: %s: '%s' must be a string, got %s", what, field, luaL_typename(L, -1));
  return anchor_top(a);
}

/* Arguments as JSON text: a string as it is, a table encoded, nil -> NULL. */
static const char *arguments_text(anchor *a, int idx, lua_Integer i) {
  lua_State *L = a->L;
  int t = lua_getfield(L, idx, "arguments");
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  if (t == LUA_TTABLE) {
    km_json_push_encoded(L, -1, KM_JSON_SORT_KEYS);
    lua_remove(L, -2);
  } else if (t != LUA_TSTRING) {
    luaL_error(L, "message %d: tool call 'arguments' must be a JSON string or a table", (int)i);
  }
  return anchor_top(a);
}

static void read_calls(anchor *a, int m, km_llm_message *msg, lua_Integer i, const char *what) {
  lua_State *L = a->L;
  if (lua_getfield(L, m, "tool_calls") == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "message %d: 'tool_calls' must be a list", (int)i);
  int list = lua_gettop(L);
  lua_Integer n = luaL_len(L, list);
  km_llm_call *calls = anchored_array(a, (size_t)n, sizeof *calls);
  for (lua_Integer k = 1; k <= n; k++) {
    if (lua_geti(L, list, k) != LUA_TTABLE)
      luaL_error(L, "message %d: tool call %d is not a table", (int)i, (int)k);
    int tc = lua_gettop(L);
    km_llm_call *c = &calls[k - 1];
    c->id = field_str(a, tc, "id", what);
    c->name = field_str(a, tc, "name", what);
    c->arguments = arguments_text(a, tc, i);
    /* The API's own shape, { id, type = "function", function = { name, arguments } }. */
    if (lua_getfield(L, tc, "function") == LUA_TTABLE) {
      int fn = lua_gettop(L);
      if (!c->name) c->name = field_str(a, fn, "name", what);
      if (!c->arguments) c->arguments = arguments_text(a, fn, i);
    }
    lua_settop(L, tc - 1);
    if (!c->name) luaL_error(L, "message %d: tool call %d has no name", (int)i, (int)k);
  }
  lua_settop(L, list - 1);
  msg->calls = calls;
  msg->n_calls = (size_t)n;
}

static void read_messages(anchor *a, int list, km_llm_message **out, size_t *n_out, lua_Integer which) {
  lua_State *L = a->L;
  if (!lua_istable(L, list)) {
    if (which) luaL_error(L, "chat_many: entry %d is not a list of messages", (int)which);
    luaL_typeerror(L, list, "table");
  }
  lua_Integer n = luaL_len(L, list);
  if (n < 1) luaL_error(L, "km.llm: a message list needs at least one message");
  km_llm_message *msgs = anchored_array(a, (size_t)n, sizeof *msgs);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_geti(L, list, i) != LUA_TTABLE) luaL_error(L, "message %d is not a table", (int)i);
    int m = lua_gettop(L);
    km_llm_message *msg = &msgs[i - 1];
    char what[32];
    snprintf(what, sizeof what, "message %d", (int)i);
    msg->role = field_str(a, m, "role", what);
    if (!msg->role || (strcmp(msg->role, "system") && strcmp(msg->role, "user") &&
                       strcmp(msg->role, "assistant") && strcmp(msg->role, "tool")))
      luaL_error(L, "message %d: role must be \"system\", \"user\", \"assistant\" or \"tool\"", (int)i);
    msg->content = field_str(a, m, "content", what);
    msg->tool_call_id = field_str(a, m, "tool_call_id", what);
    read_calls(a, m, msg, i, what);
    lua_settop(L, m - 1);
  }
  *out = msgs;
  *n_out = (size_t)n;
}

/* The option stop: a string or a list of strings. */
static void read_stop(anchor *a, int opts, km_llm_params *p) {
  lua_State *L = a->L;
  int t = lua_getfield(L, opts, "stop");
  if (t == LUA_TSTRING) {
    const char **stop = anchored_array(a, 1, sizeof *stop);
    stop[0] = anchor_top(a);
    p->stop = stop;
    p->n_stop = 1;
  } else if (t == LUA_TTABLE) {
    int list = lua_gettop(L);
    lua_Integer k = luaL_len(L, list);
    const char **stop = anchored_array(a, (size_t)k, sizeof *stop);
    for (lua_Integer i = 1; i <= k; i++) {
      if (lua_geti(L, list, i) != LUA_TSTRING) luaL_error(L, "km.llm: option 'stop' must hold strings");
      stop[i - 1] = anchor_top(a);
    }
    lua_pop(L, 1);
    p->stop = stop;
    p->n_stop = (size_t)k;
  } else if (t != LUA_TNIL) {
    luaL_error(L, "km.llm: option 'stop' must be a string or a list of strings");
  } else {
    lua_pop(L, 1);
  }
}

/* The option tools: a list of { name, description, parameters } (a JSON-schema table, or
 * its JSON text). */
static void read_tools(anchor *a, int opts, km_llm_params *p) {
  lua_State *L = a->L;
  int t = lua_getfield(L, opts, "tools");
  if (t == LUA_TTABLE) {
    int list = lua_gettop(L);
    lua_Integer k = luaL_len(L, list);
    km_llm_tool *tools = anchored_array(a, (size_t)k, sizeof *tools);
    for (lua_Integer i = 1; i <= k; i++) {
      if (lua_geti(L, list, i) != LUA_TTABLE) luaL_error(L, "km.llm: tool %d is not a table", (int)i);
      int tt = lua_gettop(L);
      char what[32];
      snprintf(what, sizeof what, "tool %d", (int)i);
      tools[i - 1].name = field_str(a, tt, "name", what);
      if (!tools[i - 1].name) luaL_error(L, "km.llm: tool %d has no name", (int)i);
      tools[i - 1].description = field_str(a, tt, "description", what);
      int pt = lua_getfield(L, tt, "parameters");
      if (pt == LUA_TTABLE) {
        km_json_push_encoded(L, -1, KM_JSON_SORT_KEYS);
        lua_remove(L, -2);
        tools[i - 1].parameters = anchor_top(a);
      } else if (pt == LUA_TSTRING) {
        tools[i - 1].parameters = anchor_top(a);
      } else if (pt != LUA_TNIL) {
        luaL_error(L, "km.llm: tool %d: 'parameters' must be a JSON-schema table", (int)i);
      }
      lua_settop(L, list);
    }
    lua_pop(L, 1);
    p->tools = tools;
    p->n_tools = (size_t)k;
  } else if (t != LUA_TNIL) {
    luaL_error(L, "km.llm: option 'tools' must be a list");
  } else {
    lua_pop(L, 1);
  }
}

static void read_params(anchor *a, int opts, client *c, km_llm_params *p) {
  lua_State *L = a->L;
  memset(p, 0, sizeof *p);
  p->model = c->model;
  p->n = 1;
  if (lua_isnoneornil(L, opts)) return;
  luaL_checktype(L, opts, LUA_TTABLE);
  const char *model = field_str(a, opts, "model", "option");
  if (model) p->model = model;
  if (lua_getfield(L, opts, "temperature") != LUA_TNIL) {
    p->has_temperature = 1;
    p->temperature = km_optfield_num(L, opts, "temperature", 0);
  }
  lua_pop(L, 1);
  lua_Integer mt = km_optfield_int(L, opts, "max_tokens", 0);
  if (mt < 0) luaL_error(L, "km.llm: option 'max_tokens' must be positive");
  p->max_tokens = (long)mt;
  lua_Integer n = km_optfield_int(L, opts, "n", 1);
  if (n < 1 || n > MAX_N) luaL_error(L, "km.llm: option 'n' must be 1..%d", MAX_N);
  p->n = (int)n;
  if (lua_getfield(L, opts, "seed") != LUA_TNIL) {
    p->has_seed = 1;
    p->seed = (long long)km_optfield_int(L, opts, "seed", 0);
  }
  lua_pop(L, 1);
  read_stop(a, opts, p);
  read_tools(a, opts, p);
  p->tool_choice = field_str(a, opts, "tool_choice", "option");
  int t = lua_getfield(L, opts, "extra");
  if (t == LUA_TTABLE) {
    km_json_push_encoded(L, -1, KM_JSON_SORT_KEYS);
    lua_remove(L, -2);
    p->extra = anchor_top(a);
  } else if (t != LUA_TNIL) {
    luaL_error(L, "km.llm: option 'extra' must be a table of request fields");
  } else {
    lua_pop(L, 1);
  }
}

/* ---- requests and their transfers ---- */

typedef km_llm_job job; /* one HTTP exchange and its retries; a request has one, or n for
                           Anthropic with n > 1 (km_llm_xfer_core.h) */

/* A started request lives in the memory of a km.llm.Request userdata, so a raise while
 * start builds it leaves the rest to its __gc. From start until poll or chat hands its
 * outcome back, it is linked into its client's list (its jobs into the engine's) and
 * pinned by the client's inflight table. An outcome decided at start (a budget refusal, a
 * replayed reply, OFFLINE) waits in the userdata's user value as { reply = } or
 * { error =, code = }. */
struct request {
  client *c;                  /* while linked; NULL once handed back, closed or collected */
  request *prev, *next;
  lua_Integer id;             /* key in the client's inflight table */
  job *jobs;                  /* malloc'd; freed by request_release */
  size_t n_jobs, left;        /* left: jobs not yet DONE (0: finished) */
  int ready;                  /* the outcome is in the user value */
  /* a finished network request's usage, added to the client's when it is handed back */
  long long in, out;
  double dollars;
  int failed;
};

/* The engine's on_done: one job of the request fewer to wait for. */
static void job_done(job *j) {
  ((request *)j->owner)->left--;
}

/* Unlinks the request from its client and frees what it owns. Idempotent: poll, chat,
 * the client's release and the request's own __gc all end here. A linked request always
 * has a live client: the client pins it, and releasing the client releases it first. */
static void request_release(request *r) {
  client *c = r->c;
  for (size_t i = 0; r->jobs && i < r->n_jobs; i++) km_llm_job_free(c ? &c->x : NULL, &r->jobs[i]);
  free(r->jobs);
  r->jobs = NULL;
  r->n_jobs = r->left = 0;
  if (c) {
    if (r->prev) r->prev->next = r->next;
    else c->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else c->tail = r->prev;
    c->n_pending--;
  }
  r->c = NULL;
  r->prev = r->next = NULL;
}

static int request_gc(lua_State *L) {
  request_release(luaL_checkudata(L, 1, REQUEST_MT));
  return 0;
}

static int request_tostring(lua_State *L) {
  request *r = luaL_checkudata(L, 1, REQUEST_MT);
  lua_pushfstring(L, "km.llm.Request %I (%s)", (LUAI_UACINT)r->id,
                  !r->c ? "done" : r->left ? "in flight" : "finished");
  return 1;
}

/* ---- turning the engine ----
 *
 * Every request of a client shares its engine, so they all move whenever any call drives
 * it: start, poll, chat. Lua code runs between turns with transfers open. */

static int any_finished(void *ud) {
  const client *c = ud;
  if (!c->head) return 1;
  for (const request *r = c->head; r; r = r->next)
    if (!r->left) return 1;
  return 0;
}

static int request_finished(void *ud) { return !((const request *)ud)->left; }

/* Turns the engine until `want` has finished (want NULL: until any request has, or none is
 * left), the deadline (km_llm_mono() seconds) passes, or SIGINT/SIGTERM arrives under
 * km.signal.catch() (then Lua decides). */
static void drive(client *c, double deadline, request *want) {
  if (want) km_llm_xfer_drive(&c->x, deadline, request_finished, want);
  else km_llm_xfer_drive(&c->x, deadline, any_finished, c);
}

/* Ends what is left of a request that a signal cut short: it fails with INTERRUPTED (chat
 * and chat_many return at once on Ctrl-C). */
static void interrupt_request(client *c, request *r) {
  const char *why = km_signal_caught == SIGTERM ? "SIGTERM" : "SIGINT";
  for (size_t i = 0; i < r->n_jobs; i++) km_llm_xfer_interrupt(&c->x, &r->jobs[i], why);
}

/* ---- replies to Lua ---- */

/* Pushes v with every secret of the process replaced (km_scrub_core.h): replies and
 * errors reach prompts, the store and exports, whatever key the server echoed. */
static void push_scrubbed(lua_State *L, const char *v) {
  size_t n = strlen(v);
  luaL_Buffer b;
  char *dst = luaL_buffinitsize(L, &b, km_scrub_bound(n));
  luaL_pushresultsize(&b, km_scrub_to(v, n, dst, NULL));
}

static void set_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  push_scrubbed(L, v);
  lua_setfield(L, -2, k);
}

static void set_int(lua_State *L, const char *k, long long v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}

static void set_num(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

/* Pushes { id, name, arguments, args } for each call: args is the decoded arguments, or
 * absent when they are not valid JSON (a model's mistake is data, not an error). */
static void push_calls(lua_State *L, const km_llm_choice *ch) {
  lua_createtable(L, (int)ch->n_calls, 0);
  for (size_t k = 0; k < ch->n_calls; k++) {
    const km_llm_call_out *o = &ch->calls[k];
    lua_createtable(L, 0, 5);
    set_str(L, "id", o->id);
    set_str(L, "type", "function");
    set_str(L, "name", o->name);
    set_str(L, "arguments", o->arguments);
    /* Strictly: what cJSON would take but Python's json.loads would not (a raw newline in
     * a string) is the model's mistake, named in arguments_error, never decoded. */
    char why[160];
    size_t n = strlen(o->arguments);
    if (km_llm_json_strict(o->arguments, n, 1, why, sizeof why) != KM_OK) {
      set_str(L, "arguments_error", why);
    } else if (km_json_push_decoded(L, o->arguments, n) == 1) {
      lua_setfield(L, -2, "args");
    } else {
      lua_pop(L, 3);
    }
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
}

static void push_choice(lua_State *L, const km_llm_choice *ch) {
  lua_createtable(L, 0, 4);
  set_str(L, "content", ch->content);
  set_str(L, "reasoning", ch->reasoning);
  set_str(L, "finish_reason", ch->finish_reason);
  push_calls(L, ch);
  lua_setfield(L, -2, "tool_calls");
}

/* Dollars for usage at the price of `model` (or the client's model); 0 when unpriced. */
static double price_of(lua_State *L, client *c, const char *model, long long in, long long out) {
  double d = 0;
  lua_getiuservalue(L, 1, UV_PRICES); /* [.., prices] */
  const char *names[2] = {model, c->model};
  for (int i = 0; i < 2; i++) {
    if (!names[i]) continue;
    if (lua_getfield(L, -1, names[i]) == LUA_TTABLE) {
      lua_getfield(L, -1, "input");
      lua_getfield(L, -2, "output");
      d = km_llm_cost(in, out, lua_tonumber(L, -2), lua_tonumber(L, -1));
      lua_pop(L, 4);
      return d;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return d;
}

/* Pushes the reply made of a finished network request's jobs, or the failure triple
 * (1 or 3 values), and notes its usage for settle(). Nothing here changes the client, so a
 * raise part way leaves its totals as they were. */
static int push_network(lua_State *L, client *c, request *req) {
  job *jobs = req->jobs;
  size_t count = req->n_jobs;
  long long in = 0, out = 0, total = 0, reasoning = 0, attempts = 0;
  int has_reasoning = 0;
  job *failed = NULL;
  double t0 = INFINITY, t1 = 0, w0 = INFINITY, w1 = 0;
  for (size_t i = 0; i < count; i++) {
    job *j = &jobs[i];
    attempts += j->attempts;
    if (j->started && j->started < t0) t0 = j->started;
    if (j->finished > t1) t1 = j->finished;
    if (j->wall_started && j->wall_started < w0) w0 = j->wall_started;
    if (j->wall_finished > w1) w1 = j->wall_finished;
    if (!j->ok) {
      if (!failed) failed = j;
      continue;
    }
    km_llm_response_scrub(&j->r, c->api_key);
    in += j->r.prompt_tokens;
    out += j->r.completion_tokens;
    total += j->r.total_tokens;
    reasoning += j->r.reasoning_tokens;
    has_reasoning |= j->r.has_reasoning_tokens;
  }
  const char *model = NULL;
  for (size_t i = 0; i < count && !model; i++)
    if (jobs[i].ok) model = jobs[i].r.model;
  double dollars = price_of(L, c, model, in, out);
  req->in = in;
  req->out = out;
  req->dollars = dollars;
  req->failed = failed != NULL;
  if (failed) {
    km_llm_scrub(failed->msg, strlen(failed->msg), c->api_key);
    lua_pushnil(L);
    push_scrubbed(L, failed->msg);
    lua_pushstring(L, failed->code);
    /* A fourth value: when the failed request ran and how often it tried. */
    lua_createtable(L, 0, 4);
    set_num(L, "latency_ms", t1 > t0 ? (t1 - t0) * 1e3 : 0);
    if (w0 < INFINITY) set_num(L, "started_at", w0);
    if (w1 > 0) set_num(L, "ended_at", w1);
    set_int(L, "attempts", attempts);
    if (failed->server_code[0]) set_str(L, "server_code", failed->server_code);
    return 4;
  }
  lua_createtable(L, 0, 12);
  const km_llm_choice *first = &jobs[0].r.choices[0];
  set_str(L, "content", first->content);
  set_str(L, "reasoning", first->reasoning);
  set_str(L, "finish_reason", first->finish_reason);
  push_calls(L, first);
  lua_setfield(L, -2, "tool_calls");
  size_t k = 0;
  lua_newtable(L); /* [reply, choices] */
  for (size_t i = 0; i < count; i++)
    for (size_t n = 0; n < jobs[i].r.n_choices; n++) {
      push_choice(L, &jobs[i].r.choices[n]);
      lua_rawseti(L, -2, (lua_Integer)++k);
    }
  lua_setfield(L, -2, "choices");
  lua_createtable(L, 0, 4);
  set_int(L, "prompt_tokens", in);
  set_int(L, "completion_tokens", out);
  set_int(L, "total_tokens", total);
  if (has_reasoning) set_int(L, "reasoning_tokens", reasoning);
  lua_setfield(L, -2, "usage");
  set_num(L, "latency_ms", t1 > t0 ? (t1 - t0) * 1e3 : 0);
  if (w0 < INFINITY) set_num(L, "started_at", w0);
  if (w1 > 0) set_num(L, "ended_at", w1);
  set_str(L, "model", model ? model : c->model);
  set_str(L, "provider", c->p->name);
  set_int(L, "attempts", attempts);
  set_num(L, "dollars", dollars);
  return 1;
}

/* ---- replay ---- */

/* Pushes the next recorded reply as a table (a recorded string is its content). Returns 0,
 * or km_fail's results where every reply has been played. */
static int replay_take(lua_State *L, client *c) {
  lua_getiuservalue(L, 1, UV_REPLIES); /* [.., replies] */
  lua_Integer total = luaL_len(L, -1);
  if (c->replay_next > total) {
    lua_pop(L, 1);
    return km_fail(L, "REPLAY_EXHAUSTED", "replay exhausted after %d replies", (int)total);
  }
  c->spent.requests++;
  int t = lua_geti(L, -1, c->replay_next++); /* [.., replies, r] */
  lua_remove(L, -2);                         /* [.., r] */
  if (t == LUA_TSTRING) {
    lua_createtable(L, 0, 1);
    lua_insert(L, -2);
    lua_setfield(L, -2, "content");
  } else if (t != LUA_TTABLE) {
    luaL_error(L, "km.llm: recorded reply %d is not a table or a string", (int)(c->replay_next - 1));
  }
  return 0;
}

/* [.., r] -> [.., r, out]: a shallow copy of the reply at r, its content filled in (the first
 * choice's, else ""). Returns out's index. */
static int replay_copy(lua_State *L, int r) {
  lua_createtable(L, 0, 12);
  int o = r + 1;
  lua_pushnil(L);
  while (lua_next(L, r)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, o);
  }
  if (lua_getfield(L, o, "content") == LUA_TNIL) { /* [.., r, o, nil] */
    lua_pushliteral(L, "");
    lua_replace(L, o + 1);
    if (lua_getfield(L, o, "choices") == LUA_TTABLE && lua_geti(L, -1, 1) == LUA_TTABLE &&
        lua_getfield(L, -1, "content") == LUA_TSTRING)
      lua_replace(L, o + 1);
    lua_settop(L, o + 1);
    lua_setfield(L, o, "content");
  }
  lua_settop(L, o);
  return o;
}

/* The reply's tool_calls copied, with args decoded from the arguments text ({} when none). */
static void replay_tool_calls(lua_State *L, int o) {
  if (lua_getfield(L, o, "tool_calls") == LUA_TTABLE) {
    int src = lua_gettop(L);
    lua_Integer n = luaL_len(L, src);
    lua_createtable(L, (int)n, 0);
    for (lua_Integer i = 1; i <= n; i++) {
      lua_createtable(L, 0, 5); /* [.., src, dst, tc] */
      if (lua_geti(L, src, i) == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
          lua_pushvalue(L, -2);
          lua_insert(L, -2);
          lua_rawset(L, -5);
        }
      }
      lua_pop(L, 1);
      if (lua_getfield(L, -1, "args") == LUA_TNIL && lua_getfield(L, -2, "arguments") == LUA_TSTRING) {
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        if (km_json_push_decoded(L, s, len) == 1) lua_setfield(L, -4, "args");
        else lua_pop(L, 3);
      }
      lua_settop(L, src + 2);
      lua_rawseti(L, -2, i);
    }
    lua_setfield(L, o, "tool_calls");
  } else {
    lua_newtable(L);
    lua_setfield(L, o, "tool_calls");
  }
  lua_settop(L, o);
}

/* finish_reason (from the tool calls) and choices (the reply's own fields) where the
 * recording has none. */
static void replay_choices(lua_State *L, int o) {
  if (lua_getfield(L, o, "finish_reason") == LUA_TNIL) {
    lua_getfield(L, o, "tool_calls");
    lua_pushstring(L, luaL_len(L, -1) > 0 ? "tool_calls" : "stop");
    lua_setfield(L, o, "finish_reason");
  }
  lua_settop(L, o);
  if (lua_getfield(L, o, "choices") == LUA_TNIL) {
    lua_createtable(L, 1, 0);
    lua_createtable(L, 0, 4);
    static const char *const fields[] = {"content", "reasoning", "tool_calls", "finish_reason"};
    for (int i = 0; i < 4; i++) {
      lua_getfield(L, o, fields[i]);
      lua_setfield(L, -2, fields[i]);
    }
    lua_rawseti(L, -2, 1);
    lua_setfield(L, o, "choices");
  }
  lua_settop(L, o);
}

/* The reply's usage, rewritten with its total; the token counts in *in and *out. */
static void replay_usage(lua_State *L, int o, long long *in, long long *out) {
  *in = 0, *out = 0;
  if (lua_getfield(L, o, "usage") == LUA_TTABLE) {
    *in = km_optfield_int(L, -1, "prompt_tokens", 0);
    *out = km_optfield_int(L, -1, "completion_tokens", 0);
  }
  lua_createtable(L, 0, 3);
  set_int(L, "prompt_tokens", *in);
  set_int(L, "completion_tokens", *out);
  set_int(L, "total_tokens", *in + *out);
  lua_setfield(L, o, "usage");
  lua_settop(L, o);
}

/* The next recorded reply, as a live one would answer: a recorded failure plays back as one;
 * missing fields are filled in; tokens and dollars are counted against the budget. */
static int replay_one(lua_State *L, client *c) {
  int failed = replay_take(L, c);
  if (failed) return failed;
  int r = lua_gettop(L);
  if (lua_getfield(L, r, "error") != LUA_TNIL) {
    const char *msg = lua_tostring(L, -1);
    lua_getfield(L, r, "code");
    const char *code = lua_tostring(L, -1);
    c->failures++;
    return km_fail(L, code ? code : "REPLAY_ERROR", "%s", msg ? msg : "recorded failure");
  }
  lua_pop(L, 1);
  int o = replay_copy(L, r); /* [.., r, out] */
  replay_tool_calls(L, o);
  replay_choices(L, o);
  long long in, out;
  replay_usage(L, o, &in, &out);
  if (lua_getfield(L, o, "model") == LUA_TNIL) {
    lua_pushstring(L, c->model ? c->model : c->p->name);
    lua_setfield(L, o, "model");
  }
  lua_settop(L, o);
  lua_getfield(L, o, "model");
  double dollars = price_of(L, c, lua_tostring(L, -1), in, out);
  lua_settop(L, o);
  set_str(L, "provider", c->p->name);
  set_int(L, "attempts", 0);
  if (lua_getfield(L, o, "latency_ms") == LUA_TNIL) {
    lua_pushnumber(L, 0);
    lua_setfield(L, o, "latency_ms");
  }
  lua_settop(L, o);
  set_num(L, "dollars", dollars);
  c->prompt_tokens += in;
  c->completion_tokens += out;
  c->spent.tokens += in + out;
  c->spent.dollars += dollars;
  lua_remove(L, r);
  return 1;
}

/* ---- start, poll, chat, chat_many ---- */

static int push_refused(lua_State *L, const char *which) {
  return km_fail(L, "BUDGET_EXCEEDED", "budget exceeded: %s", which);
}

/* The outcome of one request to a provider that sends nothing: the next recorded reply, or
 * the provider's failure (offline: OFFLINE, naming what would configure a model). */
static int local_answer(lua_State *L, client *c) {
  const km_llm_provider *p = c->p;
  if (p->flags & KM_LLM_REPLAYS) return replay_one(L, c);
  char hints[256];
  km_llm_provider_list(1, hints, sizeof hints);
  return km_fail(L, p->fail_code ? p->fail_code : "UNSUPPORTED",
                 p->fail_format ? p->fail_format : "no model configured (set %s)", hints);
}

/* Moves the 1 or 3 values at the top into a new table { reply = } or { error =, code = },
 * left in their place. */
static void outcome_table(lua_State *L, int nret) {
  lua_createtable(L, 0, 4);
  if (nret == 1) {
    lua_insert(L, -2);              /* [.., t, reply] */
    lua_setfield(L, -2, "reply");
  } else if (nret == 4) {
    lua_insert(L, -5);              /* [.., t, nil, msg, code, info] */
    lua_setfield(L, -5, "info");
    lua_setfield(L, -4, "code");
    lua_setfield(L, -3, "error");
    lua_pop(L, 1);
  } else {
    lua_insert(L, -4);              /* [.., t, nil, msg, code] */
    lua_setfield(L, -4, "code");
    lua_setfield(L, -3, "error");
    lua_pop(L, 1);
  }
}

/* Builds a request and pushes its handle, not yet linked to the client (so a raise here
 * costs nothing but garbage). The budget is checked as if `reserved` more requests had been
 * counted: chat_many decides every entry before any is sent. The client is at index 1. */
static request *prepare(lua_State *L, client *c, const km_llm_message *msgs, size_t n_msgs,
                        const km_llm_params *p, long long reserved) {
  int network = c->p->body != NULL;
  size_t per = network && (c->p->flags & KM_LLM_PER_N) ? (size_t)p->n : 1;
  request *r = lua_newuserdatauv(L, sizeof *r, 1); /* [.., handle] */
  memset(r, 0, sizeof *r);
  luaL_setmetatable(L, REQUEST_MT);
  int h = lua_gettop(L);
  km_llm_spent spent = c->spent;
  spent.requests += reserved;
  const char *refused = km_llm_budget_check(&c->budget, &spent, (long long)per);
  if (refused || !network) {
    int nret = refused ? push_refused(L, refused) : local_answer(L, c);
    outcome_table(L, nret);
    lua_setiuservalue(L, h, 1);
    lua_settop(L, h); /* replay_one can leave working values below its results */
    r->ready = 1;
    return r;
  }
  if (!(r->jobs = calloc(per, sizeof *r->jobs))) luaL_error(L, "km.llm: out of memory");
  r->n_jobs = r->left = per;
  for (size_t k = 0; k < per; k++) {
    job *j = &r->jobs[k];
    j->owner = r;
    char err[256], *body = NULL;
    if (km_llm_build_request(c->api, msgs, n_msgs, p, &body, err, sizeof err))
      luaL_error(L, "km.llm: %s", err);
    if (km_llm_job_init(&c->x, j, body)) luaL_error(L, "km.llm: cannot set up a curl handle");
  }
  return r;
}

/* Makes the prepared request at the top of the stack the client's: pinned in the inflight
 * table, linked into the list, its requests counted. */
static void enlist(lua_State *L, client *c, request *r) {
  lua_Integer id = c->next_id + 1;
  lua_getiuservalue(L, 1, UV_INFLIGHT); /* [.., handle, inflight] */
  lua_pushvalue(L, -2);
  lua_rawseti(L, -2, id);
  lua_pop(L, 1);
  /* Nothing below raises. */
  c->next_id = r->id = id;
  if (!r->ready) c->spent.requests += (long long)r->n_jobs;
  r->c = c;
  r->prev = c->tail;
  if (c->tail) c->tail->next = r;
  else c->head = r;
  c->tail = r;
  c->n_pending++;
  for (size_t i = 0; i < r->n_jobs; i++) km_llm_xfer_add(&c->x, &r->jobs[i]);
}

/* Pushes a finished request's outcome: a reply, or nil, message, code. */
static int push_outcome(lua_State *L, client *c, request *r) {
  if (!r->ready) return push_network(L, c, r);
  lua_getiuservalue(L, 1, UV_INFLIGHT); /* [.., inflight] */
  lua_rawgeti(L, -1, r->id);            /* [.., inflight, handle] */
  lua_getiuservalue(L, -1, 1);          /* [.., inflight, handle, outcome] */
  lua_replace(L, -3);
  lua_pop(L, 1);                        /* [.., outcome] */
  if (lua_getfield(L, -1, "reply") != LUA_TNIL) {
    lua_remove(L, -2);
    return 1;
  }
  lua_getfield(L, -2, "error");         /* [.., outcome, nil, msg, code] */
  lua_getfield(L, -3, "code");
  lua_remove(L, -4);
  return 3;
}

/* After push_outcome: adds the request's usage to the client's, drops it from the inflight
 * table and frees it. Nothing here raises (the inflight slot exists, so clearing it does
 * not allocate). */
static void settle(lua_State *L, client *c, request *r) {
  if (!r->ready) {
    c->prompt_tokens += r->in;
    c->completion_tokens += r->out;
    c->spent.tokens += r->in + r->out;
    c->spent.dollars += r->dollars;
    if (r->failed) c->failures++;
  }
  lua_getiuservalue(L, 1, UV_INFLIGHT);
  lua_pushnil(L);
  lua_rawseti(L, -2, r->id);
  lua_pop(L, 1);
  request_release(r);
}

/* c:start(messages, opts) -> a km.llm.Request, at once. */
static int l_start(lua_State *L) {
  client *c = client_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);
  lua_newtable(L); /* [self, messages, opts, anchor] */
  anchor a = {L, 4, 0};
  km_llm_params p;
  read_params(&a, 3, c, &p);
  km_llm_message *msgs;
  size_t n;
  read_messages(&a, 2, &msgs, &n, 0);
  request *r = prepare(L, c, msgs, n, &p, 0); /* [.., handle] */
  enlist(L, c, r);
  km_llm_xfer_step(&c->x); /* on the wire now, not at the next poll */
  return 1;
}

/* c:poll([timeout_ms]) -> { { request =, reply = | error =, code = }, ... }: every started
 * request that has finished, in the order they were started, after waiting up to
 * timeout_ms (none: no limit) for at least one. {} at once when none is pending. */
static int l_poll(lua_State *L) {
  client *c = client_check(L, 1);
  double deadline = INFINITY;
  if (!lua_isnoneornil(L, 2)) {
    lua_Number ms = luaL_checknumber(L, 2);
    luaL_argcheck(L, ms >= 0, 2, "timeout must be a non-negative number of milliseconds");
    deadline = km_llm_mono() + ms / 1e3;
  }
  lua_settop(L, 1);
  lua_newtable(L); /* [self, results] */
  drive(c, deadline, NULL);
  lua_Integer k = 0;
  for (request *r = c->head, *next; r; r = next) {
    next = r->next;
    if (r->left) continue;
    int nret = push_outcome(L, c, r);
    outcome_table(L, nret);                 /* [self, results, entry] */
    lua_getiuservalue(L, 1, UV_INFLIGHT);
    lua_rawgeti(L, -1, r->id);
    lua_setfield(L, -3, "request");
    lua_pop(L, 1);
    lua_rawseti(L, 2, ++k);
    settle(L, c, r);
  }
  return 1;
}

/* c:pending() -> requests started and not yet handed back by poll. */
static int l_pending(lua_State *L) {
  client *c = client_check(L, 1);
  lua_pushinteger(L, (lua_Integer)c->n_pending);
  return 1;
}

/* Stores the 1 or 3 values at the top as results[i] = { reply } or { nil, msg, code }. */
static void store_entry(lua_State *L, int results, lua_Integer i, int nret) {
  lua_createtable(L, 4, 0);
  if (nret == 1) {
    lua_insert(L, -2);     /* [.., entry, reply] */
    lua_rawseti(L, -2, 1);
  } else if (nret == 4) {
    lua_insert(L, -5);     /* [.., entry, nil, msg, code, info] */
    lua_rawseti(L, -5, 4);
    lua_rawseti(L, -4, 3);
    lua_rawseti(L, -3, 2);
    lua_pop(L, 1);
  } else {
    lua_insert(L, -4);     /* [.., entry, nil, msg, code] */
    lua_rawseti(L, -4, 3);
    lua_rawseti(L, -3, 2);
    lua_pop(L, 1);
  }
  lua_rawseti(L, results, i);
}

/* chat is start + drive until it finishes; chat_many starts every entry (each decided by the
 * budget in order before any is sent), drives until all have finished and hands them back
 * in order. Requests other callers started move along meanwhile and wait for their poll. */
static int do_chat(lua_State *L, int many) {
  client *c = client_check(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);
  lua_newtable(L); /* [self, list, opts, anchor] */
  anchor a = {L, 4, 0};
  km_llm_params p;
  read_params(&a, 3, c, &p);
  lua_Integer count = many ? luaL_len(L, 2) : 1;
  typedef struct {
    km_llm_message *msgs;
    size_t n;
  } entry;
  entry *es = anchored_array(&a, (size_t)count, sizeof *es);
  for (lua_Integer i = 1; i <= count; i++) {
    if (many) lua_geti(L, 2, i);
    else lua_pushvalue(L, 2);
    read_messages(&a, lua_gettop(L), &es[i - 1].msgs, &es[i - 1].n, many ? i : 0);
    lua_rawseti(L, 4, ++a.n); /* keeps the list alive with what points into it */
  }
  if (many) lua_createtable(L, (int)count, 0); /* [.., results] */
  int results = lua_gettop(L);

  if (!c->p->body) {
    for (lua_Integer i = 1; i <= count; i++) {
      const char *which = km_llm_budget_check(&c->budget, &c->spent, 1);
      int nret = which ? push_refused(L, which) : local_answer(L, c);
      if (!many) return nret;
      store_entry(L, results, i, nret);
    }
    return 1;
  }

  /* Every request is built before any joins the client, so a raise leaves none behind. */
  request **rs = anchored_array(&a, (size_t)count, sizeof *rs);
  lua_createtable(L, (int)count, 0); /* [.., results?, handles] */
  int handles = lua_gettop(L);
  long long reserved = 0;
  for (lua_Integer i = 0; i < count; i++) {
    rs[i] = prepare(L, c, es[i].msgs, es[i].n, &p, reserved);
    if (!rs[i]->ready) reserved += (long long)rs[i]->n_jobs;
    lua_rawseti(L, handles, i + 1);
  }
  for (lua_Integer i = 0; i < count; i++) {
    lua_rawgeti(L, handles, i + 1);
    enlist(L, c, rs[i]);
    lua_pop(L, 1);
  }
  for (lua_Integer i = 0; i < count; i++) {
    drive(c, INFINITY, rs[i]);
    if (rs[i]->left && km_signal_caught) interrupt_request(c, rs[i]);
  }
  for (lua_Integer i = 0; i < count; i++) {
    int nret = push_outcome(L, c, rs[i]);
    if (!many) {
      settle(L, c, rs[i]);
      return nret;
    }
    store_entry(L, results, i + 1, nret);
    settle(L, c, rs[i]);
  }
  lua_settop(L, results);
  return 1;
}

static int l_chat(lua_State *L) { return do_chat(L, 0); }
static int l_chat_many(lua_State *L) { return do_chat(L, 1); }

/* ---- the server's model list ---- */

/* c:models() -> the decoded body of GET <base>/models (OpenAI: { data = { { id, ... } } };
 * vLLM adds max_model_len, llama.cpp's server meta.n_ctx_train, others context_length), or
 * nil, message, code as chat gives them. One attempt, at most 30 s; the transfer runs on its
 * own handle, so requests in flight are not moved meanwhile. Replay and offline clients
 * have no list: nil, "...", "UNSUPPORTED". */
static int l_models(lua_State *L) {
  client *c = client_check(L, 1);
  if (!c->p->body || !c->p->models_path)
    return km_fail(L, "UNSUPPORTED", "a %s client has no model list", c->p->name);
  push_url(L, c->api, c->base_url, c->p->models_path, 0); /* [self, url] */
  /* A boxed job owns the handle and the body: a raise below frees them through __gc. */
  request *r = lua_newuserdatauv(L, sizeof *r, 1); /* [self, url, box] */
  memset(r, 0, sizeof *r);
  luaL_setmetatable(L, REQUEST_MT);
  if (!(r->jobs = calloc(1, sizeof *r->jobs))) return luaL_error(L, "km.llm: out of memory");
  r->n_jobs = 1;
  job *j = &r->jobs[0];
  j->owner = r;
  const char *url_s = lua_tostring(L, 2);
  int rc = km_llm_xfer_get(&c->x, url_s, c->x.timeout < 30 ? c->x.timeout : 30, j);
  if (rc == KM_ENOMEM) return luaL_error(L, "km.llm: cannot set up a curl handle");
  if (rc != KM_OK) {
    char msg[sizeof j->msg], code[sizeof j->code];
    snprintf(msg, sizeof msg, "%s", j->msg);
    snprintf(code, sizeof code, "%s", j->code);
    request_release(r);
    return km_fail(L, code, "%s", msg);
  }
  if (j->status < 200 || j->status > 299) {
    char line[sizeof j->msg], code[32];
    km_llm_http_error(c->api, j->status, j->resp, j->resp_n, c->api_key != NULL, line, sizeof line);
    km_llm_scrub(line, strlen(line), c->api_key);
    snprintf(code, sizeof code, "HTTP_%ld", j->status);
    request_release(r);
    return km_fail(L, code, "%s", line);
  }
  int nret = km_json_push_decoded(L, j->resp ? j->resp : "", j->resp_n); /* [.., box, v...] */
  if (nret != 1 || !lua_istable(L, -1)) {
    lua_settop(L, 3);
    request_release(r);
    return km_fail(L, "BAD_RESPONSE", "bad response from %s: not a JSON object", url_s);
  }
  request_release(r);
  return 1;
}

/* ---- the rest of the client ---- */

static int l_usage(lua_State *L) {
  client *c = client_check(L, 1);
  lua_createtable(L, 0, 7);
  set_int(L, "requests", c->spent.requests);
  set_int(L, "prompt_tokens", c->prompt_tokens);
  set_int(L, "completion_tokens", c->completion_tokens);
  set_int(L, "total_tokens", c->prompt_tokens + c->completion_tokens);
  set_num(L, "dollars", c->spent.dollars);
  set_int(L, "failures", c->failures);
  set_int(L, "attempts", c->x.attempts);
  return 1;
}

/* What the client talks to — never the key itself. */
static int l_config(lua_State *L) {
  client *c = client_check(L, 1);
  lua_createtable(L, 0, 12);
  set_str(L, "provider", c->p->name);
  set_str(L, "base_url", c->base_url);
  set_str(L, "url", c->x.url);
  set_str(L, "model", c->model);
  lua_pushboolean(L, c->api_key != NULL);
  lua_setfield(L, -2, "has_key");
  set_num(L, "timeout", c->x.timeout);
  set_num(L, "connect_timeout", c->x.connect_timeout);
  set_int(L, "max_retries", c->x.max_retries);
  set_num(L, "backoff_base", c->x.backoff_base);
  if (c->p->version_field) set_str(L, c->p->version_field, c->version);
  lua_createtable(L, 0, 3);
  if (c->budget.requests >= 0) set_int(L, "requests", c->budget.requests);
  if (c->budget.tokens >= 0) set_int(L, "tokens", c->budget.tokens);
  if (c->budget.dollars >= 0) set_num(L, "dollars", c->budget.dollars);
  lua_setfield(L, -2, "budget");
  return 1;
}

static int l_tostring(lua_State *L) {
  client *c = luaL_checkudata(L, 1, KM_LLM_MT);
  if (!c->open) lua_pushliteral(L, "km.llm.Client (closed)");
  else
    lua_pushfstring(L, "km.llm.Client (%s%s%s, model %s)", c->p->name,
                    c->base_url ? " " : "", c->base_url ? c->base_url : "",
                    c->model ? c->model : "unset");
  return 1;
}

/* llm.json_strict(text) -> true | false, why: whether text is one JSON object by RFC 8259
 * (what tool-call arguments must be to reach an export; km_llm_json_strict). */
static int l_json_strict(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  char why[160];
  if (km_llm_json_strict(s, n, 1, why, sizeof why) == KM_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_pushstring(L, why);
  return 2;
}

/* llm.providers() -> { { name, network, per_n, replay, models, key_env, url_env, base_url,
 * hint, picked = { "replies" | "key_env" | "url_env" | "named" | "fallback", ... } }, ... }:
 * the rows of km_llm_providers[], in order (what --provider accepts, and how each is chosen
 * when none is named). */
static int l_providers(lua_State *L) {
  lua_createtable(L, (int)km_llm_n_providers, 0);
  for (size_t i = 0; i < km_llm_n_providers; i++) {
    const km_llm_provider *p = &km_llm_providers[i];
    lua_createtable(L, 0, 10);
    set_str(L, "name", p->name);
    lua_pushboolean(L, p->body != NULL);
    lua_setfield(L, -2, "network");
    lua_pushboolean(L, (p->flags & KM_LLM_PER_N) != 0);
    lua_setfield(L, -2, "per_n");
    lua_pushboolean(L, (p->flags & KM_LLM_REPLAYS) != 0);
    lua_setfield(L, -2, "replay");
    lua_pushboolean(L, p->body && p->models_path);
    lua_setfield(L, -2, "models");
    set_str(L, "key_env", p->key_env);
    set_str(L, "url_env", p->url_env);
    set_str(L, "base_url", p->base_url);
    set_str(L, "hint", p->hint);
    static const struct {
      unsigned flag;
      const char *word;
    } picks[] = {{KM_LLM_REPLAYS, "replies"}, {KM_LLM_PICK_KEY, "key_env"}, {KM_LLM_PICK_URL, "url_env"},
                 {KM_LLM_PICK_NAMED, "named"}, {KM_LLM_FALLBACK, "fallback"}};
    lua_newtable(L);
    lua_Integer k = 0;
    for (size_t j = 0; j < sizeof picks / sizeof *picks; j++)
      if (p->flags & picks[j].flag) {
        lua_pushstring(L, picks[j].word);
        lua_rawseti(L, -2, ++k);
      }
    lua_setfield(L, -2, "picked");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* Monotonic seconds: for strategies that time their own steps. */
static int l_now(lua_State *L) {
  lua_pushnumber(L, km_llm_mono());
  return 1;
}

int luaopen_km_llm(lua_State *L) {
  static int curl_ready;
  if (!curl_ready) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) luaL_error(L, "km.llm: curl_global_init failed");
    curl_ready = 1;
  }
  static const luaL_Reg methods[] = {
      {"chat", l_chat},       {"chat_many", l_chat_many}, {"start", l_start},
      {"poll", l_poll},       {"pending", l_pending},     {"usage", l_usage},
      {"config", l_config},   {"close", client_release},  {"models", l_models},
      {NULL, NULL}};
  km_newclass(L, KM_LLM_MT, methods, client_release);
  luaL_getmetatable(L, KM_LLM_MT);
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  luaL_newmetatable(L, REQUEST_MT);
  lua_pushcfunction(L, request_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, request_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {{"new", l_new},
                                 {"now", l_now},
                                 {"json_strict", l_json_strict},
                                 {"providers", l_providers},
                                 {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
