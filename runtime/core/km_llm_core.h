/* km_llm_core.h — the model client's pure C parts: request JSON for the OpenAI chat
 * completions and Anthropic Messages APIs, response parsing, the retry/backoff policy,
 * server error text, key scrubbing, cost and budget arithmetic (docs/llm.md).
 *
 * No lua_State and no network here: runtime/bind/km_llm.c moves bytes with libcurl and
 * translates Lua tables; tests/c/test_llm_core.c tests this file directly.
 *
 * Providers are rows of one table, km_llm_providers[] (below): a provider's name, where its
 * configuration comes from, its URLs and headers, when it is picked, and the functions that
 * write its requests and read its replies. Adding a provider is adding a row.
 *
 * Ownership: inputs are borrowed for the duration of a call. km_llm_build_request returns
 * text the caller frees with km_llm_free; km_llm_parse_response fills a response whose
 * strings the response owns until km_llm_response_free (safe on a zeroed or half-filled one).
 *
 * Status: 0 (KM_OK) or a negative KM_E* (km.h); where there is an err buffer it says why
 * in one line. */
#ifndef KM_LLM_CORE_H
#define KM_LLM_CORE_H

#include <stddef.h>

#include "km.h"

/* A provider: the index of its row in km_llm_providers[] (below). The two HTTP APIs' rows
 * have names; every function that takes a km_llm_api takes any row's index. */
typedef enum { KM_LLM_OPENAI = 0, KM_LLM_ANTHROPIC = 1 } km_llm_api;

/* Anthropic requires max_tokens; this is sent when the caller gives none. */
#define KM_LLM_DEFAULT_MAX_TOKENS 4096

/* Longest server error text kept in a message (the rest becomes "..."). */
#define KM_LLM_ERROR_TEXT_MAX 300

/* ---- requests ---- */

typedef struct {
  const char *id, *name;
  const char *arguments; /* JSON text of the arguments object; NULL: "{}" */
} km_llm_call;

typedef struct {
  const char *role;          /* "system" | "user" | "assistant" | "tool" */
  const char *content;       /* NULL: no text */
  const km_llm_call *calls;  /* assistant tool calls */
  size_t n_calls;
  const char *tool_call_id;  /* role "tool": the call this answers */
} km_llm_message;

typedef struct {
  const char *name, *description; /* description may be NULL */
  const char *parameters;         /* JSON Schema text; NULL: an empty object schema */
} km_llm_tool;

typedef struct {
  const char *model;                /* NULL: omitted (single-model local servers) */
  int has_temperature;
  double temperature;
  long max_tokens;                  /* 0: omitted for OpenAI, the default for Anthropic */
  int n;                            /* choices per request, OpenAI only; <= 1 is omitted */
  const char *const *stop;          /* stop strings */
  size_t n_stop;
  int has_seed;                     /* OpenAI only: Anthropic has no seed */
  long long seed;
  const km_llm_tool *tools;
  size_t n_tools;
  const char *tool_choice;          /* NULL, "auto", "none", "required" or a tool's name */
  const char *extra;                /* JSON object text whose members are set at the top
                                       level of the body, replacing any built there: vendor
                                       options (top_p, reasoning_effort, thinking, ...) */
} km_llm_params;

/* Builds the request body with the provider's body function, then sets p->extra's members
 * and scrubs the process's secrets (km_scrub_core.h). Anthropic: system messages join into the top-level `system`,
 * assistant tool calls become tool_use blocks (arguments that are not a JSON object become
 * {}), tool results become tool_result blocks in a user message, and consecutive turns of
 * one role merge (the API wants user/assistant alternation).
 * KM_EINVAL with err set for an unknown role, unparsable tool parameters, an extra that
 * is not a JSON object, or a provider that sends no requests (replay, offline). */
int km_llm_build_request(km_llm_api api, const km_llm_message *msgs, size_t n_msgs,
                         const km_llm_params *p, char **json_out, char *err, size_t errn);
void km_llm_free(void *p);

/* ---- responses ---- */

typedef struct {
  char *id, *name;
  char *arguments; /* JSON text as the server sent it (Anthropic: the input object printed) */
} km_llm_call_out;

typedef struct {
  char *content;         /* never NULL after a successful parse ("" when none) */
  char *reasoning;       /* NULL when the server sent none */
  char *finish_reason;   /* OpenAI's words: Anthropic end_turn/stop_sequence -> "stop",
                            max_tokens -> "length", tool_use -> "tool_calls"; may be NULL */
  km_llm_call_out *calls;
  size_t n_calls;
} km_llm_choice;

typedef struct {
  km_llm_choice *choices;
  size_t n_choices;      /* >= 1 after a successful parse */
  char *model;           /* may be NULL */
  long long prompt_tokens, completion_tokens, total_tokens, reasoning_tokens;
  int has_usage, has_reasoning_tokens;
} km_llm_response;

/* Parses a 2xx body with the provider's parse function. KM_ECORRUPT with err saying what
 * was wrong: not JSON (or cut off), not an object, no choices / an empty choice list, a
 * choice without a message, no content list (Anthropic), an error object where a reply
 * should be. KM_EINVAL for a provider that reads no replies. KM_ENOMEM. */
int km_llm_parse_response(km_llm_api api, const char *body, size_t n, km_llm_response *out,
                          char *err, size_t errn);
void km_llm_response_free(km_llm_response *r);

/* ---- providers ---- */

struct cJSON;
/* A request body being built (km_llm_core.c): a body function adds its members to it. */
typedef struct km_llm_body km_llm_body;

/* When a provider is picked without being named (llm.new without cfg.provider), in this
 * order: a config with replies picks the KM_LLM_REPLAYS row; else the first row, in table
 * order, whose KM_LLM_PICK_KEY / KM_LLM_PICK_URL variable is set; else, when a model or a
 * server is named anyway (KM_MODEL, cfg.model, cfg.base_url, cfg.api_key), the
 * KM_LLM_PICK_NAMED row; else the KM_LLM_FALLBACK row. */
enum {
  KM_LLM_PER_N = 1 << 0,      /* the API has no n: n choices are n requests, run side by side */
  KM_LLM_REPLAYS = 1 << 1,    /* answers from recorded replies (cfg.replies) */
  KM_LLM_PICK_KEY = 1 << 2,   /* picked when key_env is set */
  KM_LLM_PICK_URL = 1 << 3,   /* picked when url_env is set */
  KM_LLM_PICK_NAMED = 1 << 4, /* picked when a model or server is named with no provider */
  KM_LLM_FALLBACK = 1 << 5,   /* picked when nothing else is */
};

typedef struct {
  const char *name;          /* cfg.provider, config().provider, reply.provider */
  unsigned flags;            /* KM_LLM_* above */
  /* configuration: a config table's field wins over the environment */
  const char *key_env;       /* the API key (cfg.api_key); NULL: none */
  const char *url_env;       /* the base URL (cfg.base_url); NULL: none */
  const char *base_url;      /* the default base URL */
  const char *hint;          /* the variable a user sets to get this provider (the offline
                                message lists every row's); NULL: none */
  /* URLs (km_llm_url): base, then prefix unless the base ends in it, then the path */
  const char *prefix;        /* a version path the base may leave out ("/v1"); "" none */
  const char *path;          /* the requests' path ("/chat/completions") */
  const char *models_path;   /* the model list's ("/models"); NULL: it has none */
  /* headers: "auth_header: auth_prefix KEY" when there is a key, and a version header
     whose value is cfg[version_field] or version_default */
  const char *auth_header, *auth_prefix;
  const char *version_header, *version_field, *version_default;
  /* the wire format; NULL for a provider that sends nothing (replay, offline) */
  int (*body)(km_llm_body *b, const km_llm_message *msgs, size_t n_msgs, const km_llm_params *p,
              char *err, size_t errn);
  int (*parse)(const struct cJSON *root, const char *body, size_t n, km_llm_response *out,
               char *err, size_t errn);
  /* a provider that sends nothing and replays nothing fails every request: its code and a
     message format whose one %s is the hints of every row ("A or B") */
  const char *fail_code, *fail_format;
} km_llm_provider;

extern const km_llm_provider km_llm_providers[];
extern const size_t km_llm_n_providers;

/* The row named `name`'s index, or -1. */
int km_llm_provider_find(const char *name);

/* Every row's name (hints = 0) or hint (hints = 1), in table order, as a list in words:
 * "openai, anthropic, replay or offline". Cut to fit outn. */
void km_llm_provider_list(int hints, char *out, size_t outn);

/* The URL of `path` on the provider's server at `base` (trailing slashes dropped): base +
 * path when base ends in the prefix, else base + prefix + path; with `whole`, base itself
 * when it already ends in prefix + path. Written to out as snprintf does (cut to fit outn,
 * out may be NULL when outn is 0); returns its length. */
size_t km_llm_url(km_llm_api api, const char *base, const char *path, int whole, char *out,
                  size_t outn);

/* ---- errors, keys ---- */

/* The server's error text from an error body: error.message, error (a string), message or
 * detail; else the body itself. Whitespace runs become one space, so the text is one line;
 * cut at KM_LLM_ERROR_TEXT_MAX bytes with "...". */
void km_llm_error_text(const char *body, size_t n, char *out, size_t outn);

/* The server's own error code from an error body (OpenAI's error.code, e.g.
 * "context_length_exceeded"; Anthropic's error.type), when it is a short word; "" otherwise. */
void km_llm_error_code(const char *body, size_t n, char *out, size_t outn);

/* One line for an HTTP error status: "HTTP 404: <server text>". 401 and 403 get a fixed
 * line naming the variable to check (the provider's key_env) and no server text (servers
 * echo parts of keys). */
void km_llm_http_error(km_llm_api api, long status, const char *body, size_t n, int has_key,
                       char *out, size_t outn);

/* Overwrites every occurrence of key in s[0..n) with '*' of the same length; returns how
 * many. Keys shorter than KM_LLM_SCRUB_MIN are left alone (they would mask ordinary text). */
#define KM_LLM_SCRUB_MIN 4
size_t km_llm_scrub(char *s, size_t n, const char *key);
void km_llm_response_scrub(km_llm_response *r, const char *key);

/* ---- retry policy ---- */

/* How an attempt ended below HTTP (the binding maps curl's codes to these). */
typedef enum {
  KM_LLM_NET_OK = 0,         /* a whole HTTP response arrived */
  KM_LLM_NET_TIMEOUT,        /* the total timeout passed after connecting */
  KM_LLM_NET_CONNECT_TIMEOUT,/* no connection within connect_timeout */
  KM_LLM_NET_REFUSED,        /* refused or host not resolved: the server is not there */
  KM_LLM_NET_RESET,          /* the connection broke mid-exchange */
  KM_LLM_NET_TOO_LARGE,      /* the body passed the size limit */
  KM_LLM_NET_OTHER,          /* TLS setup, bad URL, ...: retrying will not help */
} km_llm_net;

/* 1 when an attempt that ended this way is worth repeating: 429, 5xx, timeouts, resets. */
int km_llm_retryable(km_llm_net net, long status);

/* Full-jitter exponential backoff before retry number `retry` (1, 2, ...): u * min(cap,
 * base * 2^(retry-1)), u uniform in [0, 1). */
double km_llm_backoff(int retry, double base, double cap, double u);

/* A Retry-After value in seconds: delay-seconds (decimals accepted) or an HTTP-date
 * (IMF-fixdate) relative to now (Unix seconds), at least 0. -1 when absent or unreadable. */
double km_llm_parse_retry_after(const char *value, double now);

/* The wait before retry number `retry`: the server's Retry-After when it gave one (>= 0),
 * else the backoff; never more than cap. */
double km_llm_retry_delay(int retry, double base, double cap, double retry_after, double u);

/* ---- cost and budget ---- */

/* Dollars for a call at prices in dollars per million tokens. */
double km_llm_cost(long long prompt_tokens, long long completion_tokens, double input_per_m,
                   double output_per_m);

typedef struct {
  long long requests, tokens; /* < 0: no limit */
  double dollars;             /* < 0: no limit */
} km_llm_budget;

typedef struct {
  long long requests, tokens;
  double dollars;
} km_llm_spent;

/* NULL when `more` new requests fit, else which limit they break: "requests" (counted
 * exactly), "tokens" or "dollars" (a call cannot know its own cost before it is made, so
 * these refuse once what was spent has reached the limit). */
const char *km_llm_budget_check(const km_llm_budget *limit, const km_llm_spent *spent,
                                long long more);

/* ---- strict JSON ---- */

/* KM_OK when s[0..n) is one JSON value by RFC 8259 (and an object, when want_object), else
 * KM_EINVAL with err saying what and where ("invalid JSON: a raw newline inside a string
 * (write \\n) at byte 17"). Stricter than cJSON: raw control characters in strings,
 * numbers such as 01, 1. or +1, and trailing text are refused, as Python's json.loads does.
 * Used on tool-call arguments, which reach exports. */
int km_llm_json_strict(const char *s, size_t n, int want_object, char *err, size_t errn);

#endif
