/* km_llm_core.c — the providers' table, request building, response parsing, retry policy,
 * cost (km_llm_core.h).
 *
 * cJSON builds and reads the JSON trees: request bodies are small and every string in them
 * is a C string from the binding, so cJSON's NUL-terminated strings lose nothing here. */
#define _GNU_SOURCE /* memmem, timegm */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <cJSON.h>

#include "km_llm_core.h"
#include "km_scrub_core.h"
#include "km_utf8_core.h"

static void set_err(char *err, size_t errn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errn, const char *fmt, ...) {
  if (!err || !errn) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errn, fmt, ap);
  va_end(ap);
}

void km_llm_free(void *p) { cJSON_free(p); }

static const km_llm_provider *provider_of(km_llm_api api);

/* ---- a growable string, for joining text blocks ---- */

typedef struct {
  char *s;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = '\0';
}

static void sb_adds(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* ---- requests ---- */

/* A server refuses a body that is not UTF-8 (HTTP 400), and cJSON prints the bytes of its
 * strings as they are: each byte of *text that is not valid UTF-8 (a tool result that printed
 * raw bytes; it can stand only inside a JSON string) becomes \ufffd, as km.json writes it.
 * *text is cJSON_malloc'd and replaced by a cJSON_malloc'd copy; KM_ENOMEM leaves it freed. */
static int utf8_text(char **text) {
  size_t n = strlen(*text), len = km_utf8_repaired_len(*text, n);
  if (len == n) return KM_OK;
  char *out = cJSON_malloc(len + 1);
  if (out) {
    km_utf8_repair(out, *text, n);
    out[len] = '\0';
  }
  cJSON_free(*text);
  *text = out;
  return out ? KM_OK : KM_ENOMEM;
}

/* cJSON's builders return NULL on a failed allocation and its Add* calls then quietly add
 * nothing; a request with a hole would still print and be sent. Every node goes through
 * put(), which remembers any failure, so the caller can refuse the whole tree. */
struct km_llm_body {
  int oom;
  cJSON *root; /* the body's object */
};
typedef km_llm_body bld;

/* Adds item to parent (under key when parent is an object); returns item or NULL. */
static cJSON *put(bld *b, cJSON *parent, const char *key, cJSON *item) {
  if (!item || !parent) {
    cJSON_Delete(item);
    b->oom = 1;
    return NULL;
  }
  int ok = key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item);
  if (!ok) {
    cJSON_Delete(item);
    b->oom = 1;
    return NULL;
  }
  return item;
}

static void put_str(bld *b, cJSON *parent, const char *key, const char *s) {
  put(b, parent, key, cJSON_CreateString(s));
}

static void put_num(bld *b, cJSON *parent, const char *key, double d) {
  put(b, parent, key, cJSON_CreateNumber(d));
}

static const char *role_kind(const char *role) {
  static const char *roles[] = {"system", "user", "assistant", "tool"};
  for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
    if (role && !strcmp(role, roles[i])) return roles[i];
  return NULL;
}

/* Tool parameters arrive as JSON text (the binding encodes the Lua schema table). NULL with
 * *bad set when the text does not parse; NULL alone when memory ran out. */
static cJSON *parse_schema(const km_llm_tool *t, int anthropic, int *bad) {
  if (!t->parameters) {
    /* Anthropic requires input_schema: a tool without parameters takes an empty object. */
    return cJSON_Parse(anthropic ? "{\"type\":\"object\",\"properties\":{}}" : "{}");
  }
  cJSON *o = cJSON_Parse(t->parameters);
  if (!o) *bad = 1;
  return o;
}

static void put_stop(bld *b, cJSON *root, const char *field, const km_llm_params *p) {
  if (!p->n_stop) return;
  cJSON *a = put(b, root, field, cJSON_CreateArray());
  for (size_t i = 0; a && i < p->n_stop; i++) put_str(b, a, NULL, p->stop[i]);
}

/* Checks every role first, so the builders below never meet an unknown one. */
static int check_roles(const km_llm_message *msgs, size_t n, char *err, size_t errn) {
  for (size_t i = 0; i < n; i++)
    if (!role_kind(msgs[i].role)) {
      set_err(err, errn, "message %zu: unknown role '%s'", i + 1,
              msgs[i].role ? msgs[i].role : "(none)");
      return KM_EINVAL;
    }
  return KM_OK;
}

static int put_tools(bld *b, cJSON *root, const km_llm_params *p, int anthropic, char *err,
                     size_t errn) {
  if (!p->n_tools) return KM_OK;
  cJSON *tools = put(b, root, "tools", cJSON_CreateArray());
  for (size_t i = 0; tools && i < p->n_tools; i++) {
    const km_llm_tool *t = &p->tools[i];
    int bad = 0;
    /* OpenAI lets a tool leave parameters out; Anthropic gets an empty object schema. */
    cJSON *schema = anthropic || t->parameters ? parse_schema(t, anthropic, &bad) : NULL;
    if (bad) {
      set_err(err, errn, "tool '%s': parameters are not valid JSON", t->name ? t->name : "?");
      return KM_EINVAL;
    }
    cJSON *o = put(b, tools, NULL, cJSON_CreateObject());
    cJSON *fn = anthropic ? o : put(b, o, "function", cJSON_CreateObject());
    if (!anthropic) put_str(b, o, "type", "function");
    put_str(b, fn, "name", t->name ? t->name : "");
    if (t->description) put_str(b, fn, "description", t->description);
    if (anthropic || t->parameters) put(b, fn, anthropic ? "input_schema" : "parameters", schema);
  }
  return KM_OK;
}

static int openai_body(bld *b, const km_llm_message *msgs, size_t n_msgs, const km_llm_params *p,
                       char *err, size_t errn) {
  cJSON *root = b->root;
  if (p->model) put_str(b, root, "model", p->model);
  cJSON *arr = put(b, root, "messages", cJSON_CreateArray());
  for (size_t i = 0; arr && i < n_msgs; i++) {
    const km_llm_message *m = &msgs[i];
    const char *role = role_kind(m->role);
    cJSON *o = put(b, arr, NULL, cJSON_CreateObject());
    put_str(b, o, "role", role);
    /* An assistant turn that only calls tools has content null, as the API writes it. */
    if (role[0] == 'a' && !m->content && m->n_calls) put(b, o, "content", cJSON_CreateNull());
    else put_str(b, o, "content", m->content ? m->content : "");
    if (role[0] == 't' && m->tool_call_id) put_str(b, o, "tool_call_id", m->tool_call_id);
    if (role[0] != 'a' || !m->n_calls) continue;
    cJSON *calls = put(b, o, "tool_calls", cJSON_CreateArray());
    for (size_t k = 0; calls && k < m->n_calls; k++) {
      const km_llm_call *c = &m->calls[k];
      cJSON *tc = put(b, calls, NULL, cJSON_CreateObject());
      if (c->id) put_str(b, tc, "id", c->id);
      put_str(b, tc, "type", "function");
      cJSON *fn = put(b, tc, "function", cJSON_CreateObject());
      put_str(b, fn, "name", c->name ? c->name : "");
      put_str(b, fn, "arguments", c->arguments ? c->arguments : "{}");
    }
  }
  if (p->has_temperature) put_num(b, root, "temperature", p->temperature);
  if (p->max_tokens > 0) put_num(b, root, "max_tokens", (double)p->max_tokens);
  if (p->n > 1) put_num(b, root, "n", p->n);
  put_stop(b, root, "stop", p);
  if (p->has_seed) put_num(b, root, "seed", (double)p->seed);
  int rc = put_tools(b, root, p, 0, err, errn);
  if (rc) return rc;
  if (p->tool_choice) {
    const char *tc = p->tool_choice;
    if (!strcmp(tc, "auto") || !strcmp(tc, "none") || !strcmp(tc, "required")) {
      put_str(b, root, "tool_choice", tc);
    } else {
      cJSON *o = put(b, root, "tool_choice", cJSON_CreateObject());
      put_str(b, o, "type", "function");
      put_str(b, put(b, o, "function", cJSON_CreateObject()), "name", tc);
    }
  }
  return KM_OK;
}

/* Anthropic turns: consecutive items of one role land in one message, because the API
 * wants user/assistant alternation (tool results and the next user text share a turn). */
typedef struct {
  bld *b;
  cJSON *arr;       /* the messages array */
  cJSON *last;      /* the last message object */
  const char *last_role;
} turns;

static cJSON *text_block(bld *b, const char *s) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  put_str(b, o, "type", "text");
  put_str(b, o, "text", s);
  return o;
}

/* The content list of the current turn, turning a string content into a text block (an
 * empty text block is refused by the API, so an empty string becomes no block). */
static cJSON *turn_blocks(turns *t) {
  cJSON *content = cJSON_GetObjectItemCaseSensitive(t->last, "content");
  if (!cJSON_IsString(content)) return content;
  cJSON *blocks = cJSON_CreateArray();
  if (!blocks) {
    t->b->oom = 1;
    return NULL;
  }
  if (*content->valuestring) put(t->b, blocks, NULL, text_block(t->b, content->valuestring));
  if (!cJSON_ReplaceItemInObjectCaseSensitive(t->last, "content", blocks)) {
    cJSON_Delete(blocks);
    t->b->oom = 1;
    return NULL;
  }
  return blocks;
}

/* Adds plain text: a string content when it starts a turn, a text block when it joins one. */
static void turn_text(turns *t, const char *role, const char *text) {
  if (t->last && !strcmp(t->last_role, role)) {
    cJSON *blocks = turn_blocks(t);
    if (blocks && *text) put(t->b, blocks, NULL, text_block(t->b, text));
    return;
  }
  cJSON *m = put(t->b, t->arr, NULL, cJSON_CreateObject());
  put_str(t->b, m, "role", role);
  put_str(t->b, m, "content", text);
  t->last = m;
  t->last_role = role;
}

/* Adds a content block (ownership passes to the tree, or it is freed). */
static void turn_block(turns *t, const char *role, cJSON *block) {
  if (t->last && !strcmp(t->last_role, role)) {
    put(t->b, turn_blocks(t), NULL, block);
    return;
  }
  cJSON *m = put(t->b, t->arr, NULL, cJSON_CreateObject());
  put_str(t->b, m, "role", role);
  put(t->b, put(t->b, m, "content", cJSON_CreateArray()), NULL, block);
  t->last = m;
  t->last_role = role;
}

static int anthropic_body(bld *b, const km_llm_message *msgs, size_t n_msgs,
                          const km_llm_params *p, char *err, size_t errn) {
  cJSON *root = b->root;
  if (p->model) put_str(b, root, "model", p->model);
  put_num(b, root, "max_tokens",
          (double)(p->max_tokens > 0 ? p->max_tokens : KM_LLM_DEFAULT_MAX_TOKENS));
  sbuf sys = {0};
  turns t = {b, cJSON_CreateArray(), NULL, NULL};
  if (!t.arr) b->oom = 1;
  for (size_t i = 0; t.arr && i < n_msgs; i++) {
    const km_llm_message *m = &msgs[i];
    const char *role = role_kind(m->role);
    const char *text = m->content ? m->content : "";
    switch (role[0]) {
    case 's':
      if (sys.n) sb_adds(&sys, "\n\n");
      sb_adds(&sys, text);
      break;
    case 'u':
      turn_text(&t, "user", text);
      break;
    case 'a':
      if (!m->n_calls) {
        turn_text(&t, "assistant", text);
        break;
      }
      if (*text) turn_block(&t, "assistant", text_block(b, text));
      for (size_t k = 0; k < m->n_calls; k++) {
        const km_llm_call *c = &m->calls[k];
        cJSON *blk = cJSON_CreateObject();
        put_str(b, blk, "type", "tool_use");
        put_str(b, blk, "id", c->id ? c->id : "");
        put_str(b, blk, "name", c->name ? c->name : "");
        /* input must be an object; arguments a model got wrong must not sink the request. */
        cJSON *input = c->arguments ? cJSON_Parse(c->arguments) : NULL;
        if (!cJSON_IsObject(input)) {
          cJSON_Delete(input);
          input = cJSON_CreateObject();
        }
        put(b, blk, "input", input);
        turn_block(&t, "assistant", blk);
      }
      break;
    case 't': {
      cJSON *blk = cJSON_CreateObject();
      put_str(b, blk, "type", "tool_result");
      put_str(b, blk, "tool_use_id", m->tool_call_id ? m->tool_call_id : "");
      put_str(b, blk, "content", text);
      turn_block(&t, "user", blk);
      break;
    }
    }
  }
  if (sys.oom) b->oom = 1;
  if (sys.n) put_str(b, root, "system", sys.s);
  free(sys.s);
  put(b, root, "messages", t.arr);
  if (p->has_temperature) put_num(b, root, "temperature", p->temperature);
  put_stop(b, root, "stop_sequences", p);
  int rc = put_tools(b, root, p, 1, err, errn);
  if (rc) return rc;
  if (p->tool_choice) {
    const char *tc = p->tool_choice;
    cJSON *o = put(b, root, "tool_choice", cJSON_CreateObject());
    if (!strcmp(tc, "auto") || !strcmp(tc, "none")) {
      put_str(b, o, "type", tc);
    } else if (!strcmp(tc, "required")) {
      put_str(b, o, "type", "any");
    } else {
      put_str(b, o, "type", "tool");
      put_str(b, o, "name", tc);
    }
  }
  return KM_OK;
}

static int merge_extra(bld *b, cJSON *root, const char *extra, char *err, size_t errn) {
  if (!extra) return KM_OK;
  cJSON *x = cJSON_Parse(extra);
  if (!cJSON_IsObject(x)) {
    cJSON_Delete(x);
    set_err(err, errn, "extra: not a JSON object");
    return KM_EINVAL;
  }
  while (x->child) {
    cJSON *item = cJSON_DetachItemViaPointer(x, x->child);
    cJSON_DeleteItemFromObjectCaseSensitive(root, item->string);
    /* AddItemToObject copies the key before it frees the item's own copy. */
    if (!cJSON_AddItemToObject(root, item->string, item)) {
      cJSON_Delete(item);
      b->oom = 1;
    }
  }
  cJSON_Delete(x);
  return KM_OK;
}

int km_llm_build_request(km_llm_api api, const km_llm_message *msgs, size_t n_msgs,
                         const km_llm_params *p, char **json_out, char *err, size_t errn) {
  *json_out = NULL;
  set_err(err, errn, "%s", "");
  const km_llm_provider *pv = provider_of(api);
  if (!pv || !pv->body) {
    set_err(err, errn, "provider %s sends no requests", pv ? pv->name : "?");
    return KM_EINVAL;
  }
  int rc = check_roles(msgs, n_msgs, err, errn);
  if (rc) return rc;
  bld b = {0, cJSON_CreateObject()};
  cJSON *root = b.root;
  if (!root) b.oom = 1;
  else rc = pv->body(&b, msgs, n_msgs, p, err, errn);
  if (!rc && root) rc = merge_extra(&b, root, p->extra, err, errn);
  char *text = !rc && !b.oom ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (rc) return rc;
  if (!text) {
    set_err(err, errn, "out of memory building the request");
    return KM_ENOMEM;
  }
  /* A body goes to a server outside: no secret of this process leaves in it (a prompt
   * that quotes a compile log, a tool result, a key pasted into a task). */
  char *clean;
  size_t n;
  if (km_scrub(text, strlen(text), &clean, &n, NULL)) {
    cJSON_free(text);
    set_err(err, errn, "out of memory building the request");
    return KM_ENOMEM;
  }
  if (clean) {
    char *copy = cJSON_malloc(n + 1); /* the caller frees with km_llm_free */
    if (copy) memcpy(copy, clean, n + 1);
    free(clean);
    cJSON_free(text);
    if (!copy) {
      set_err(err, errn, "out of memory building the request");
      return KM_ENOMEM;
    }
    text = copy;
  }
  if (utf8_text(&text)) {
    set_err(err, errn, "out of memory building the request");
    return KM_ENOMEM;
  }
  *json_out = text;
  return KM_OK;
}

/* ---- responses ---- */

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

static char *dup_s(const char *s) { return dup_n(s, strlen(s)); }

static const char *get_str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int get_count(const cJSON *o, const char *k, long long *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0) return 0;
  *out = (long long)v->valuedouble;
  return 1;
}

void km_llm_response_free(km_llm_response *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_choices; i++) {
    km_llm_choice *c = &r->choices[i];
    free(c->content);
    free(c->reasoning);
    free(c->finish_reason);
    for (size_t k = 0; k < c->n_calls; k++) {
      free(c->calls[k].id);
      free(c->calls[k].name);
      free(c->calls[k].arguments);
    }
    free(c->calls);
  }
  free(r->choices);
  free(r->model);
  memset(r, 0, sizeof *r);
}

/* 1 when the text stops with an array, object or string still open: the shape of a
 * body cut off in transit, which cJSON reports wherever its last token began. */
static int ends_open(const char *s, size_t n) {
  size_t depth = 0;
  int in_string = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = 0;
    } else if (c == '"') {
      in_string = 1;
    } else if (c == '[' || c == '{') {
      depth++;
    } else if (c == ']' || c == '}') {
      if (!depth) return 0;
      depth--;
    }
  }
  return in_string || depth > 0;
}

/* Describes a body that did not parse, with where it broke and how it starts. */
static void bad_json(const char *body, size_t n, const char *end, char *err, size_t errn) {
  size_t pos = end && end >= body && end <= body + n ? (size_t)(end - body) : n;
  if (n && (body[0] == '{' || body[0] == '[') && ends_open(body, n)) pos = n;
  char head[41];
  size_t h = 0;
  for (size_t i = 0; i < n && h < sizeof head - 1; i++)
    head[h++] = isprint((unsigned char)body[i]) ? body[i] : ' ';
  head[h] = '\0';
  if (n == 0) set_err(err, errn, "response body is empty, not JSON");
  else if (pos >= n)
    set_err(err, errn, "response is not valid JSON: it ends early, after %zu bytes (truncated?)", n);
  else
    set_err(err, errn, "response is not valid JSON (error at byte %zu of %zu; it starts \"%s%s\")",
            pos, n, head, n > h ? "..." : "");
}

static int parse_root(const char *body, size_t n, cJSON **root, char *err, size_t errn) {
  const char *end = NULL;
  *root = cJSON_ParseWithLengthOpts(body, n, &end, 0);
  if (!*root) {
    bad_json(body, n, end, err, errn);
    return KM_ECORRUPT;
  }
  /* Trailing bytes other than whitespace mean the body is not one JSON value. */
  for (const char *p = end; p && p < body + n; p++)
    if (!isspace((unsigned char)*p)) {
      bad_json(body, n, p, err, errn);
      cJSON_Delete(*root);
      *root = NULL;
      return KM_ECORRUPT;
    }
  if (!cJSON_IsObject(*root)) {
    set_err(err, errn, "response is not a JSON object");
    cJSON_Delete(*root);
    *root = NULL;
    return KM_ECORRUPT;
  }
  return KM_OK;
}

/* A 2xx reply that carries an error object instead of a result (some proxies do this). */
static int embedded_error(const cJSON *root, const char *body, size_t n, const char *want,
                          char *err, size_t errn) {
  if (!cJSON_GetObjectItemCaseSensitive(root, "error")) return 0;
  char text[KM_LLM_ERROR_TEXT_MAX + 8];
  km_llm_error_text(body, n, text, sizeof text);
  set_err(err, errn, "response has an error instead of %s: %s", want, text);
  return 1;
}

static int parse_openai_calls(const cJSON *arr, km_llm_choice *c) {
  size_t n = (size_t)cJSON_GetArraySize(arr);
  if (!n) return KM_OK;
  c->calls = calloc(n, sizeof *c->calls);
  if (!c->calls) return KM_ENOMEM;
  const cJSON *tc;
  cJSON_ArrayForEach(tc, arr) {
    km_llm_call_out *o = &c->calls[c->n_calls++];
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const char *id = get_str(tc, "id"), *name = get_str(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    o->id = dup_s(id ? id : "");
    o->name = dup_s(name ? name : "");
    /* Arguments are a JSON string by the spec; a few servers send the object itself. */
    if (cJSON_IsString(args)) o->arguments = dup_s(args->valuestring);
    else if (args && !cJSON_IsNull(args)) o->arguments = cJSON_PrintUnformatted(args);
    else o->arguments = dup_s("{}");
    if (!o->id || !o->name || !o->arguments) return KM_ENOMEM;
  }
  return KM_OK;
}

/* Content is a string, null, or (some servers) a list of {type="text", text=...} parts. */
static char *content_text(const cJSON *v) {
  if (cJSON_IsString(v)) return dup_s(v->valuestring);
  sbuf b = {0};
  sb_add(&b, "", 0);
  const cJSON *part;
  if (cJSON_IsArray(v)) cJSON_ArrayForEach(part, v) {
      const char *t = cJSON_IsString(part) ? part->valuestring : get_str(part, "text");
      if (t) sb_adds(&b, t);
    }
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

static int parse_openai(const cJSON *root, const char *body, size_t n, km_llm_response *r,
                        char *err, size_t errn) {
  const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
  if (!cJSON_IsArray(choices)) {
    if (!embedded_error(root, body, n, "choices", err, errn))
      set_err(err, errn, "response has no 'choices' list");
    return KM_ECORRUPT;
  }
  size_t nc = (size_t)cJSON_GetArraySize(choices);
  if (!nc) {
    set_err(err, errn, "response has an empty 'choices' list");
    return KM_ECORRUPT;
  }
  r->choices = calloc(nc, sizeof *r->choices);
  if (!r->choices) return KM_ENOMEM;
  const cJSON *ch;
  cJSON_ArrayForEach(ch, choices) {
    km_llm_choice *c = &r->choices[r->n_choices++];
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(ch, "message");
    if (!cJSON_IsObject(msg)) {
      set_err(err, errn, "choice %zu has no 'message' object", r->n_choices);
      return KM_ECORRUPT;
    }
    if (!(c->content = content_text(cJSON_GetObjectItemCaseSensitive(msg, "content"))))
      return KM_ENOMEM;
    /* vLLM/SGLang say reasoning_content, others (OpenRouter, llama.cpp) reasoning. */
    const char *reasoning = get_str(msg, "reasoning_content");
    if (!reasoning) reasoning = get_str(msg, "reasoning");
    if (reasoning && !(c->reasoning = dup_s(reasoning))) return KM_ENOMEM;
    const char *fr = get_str(ch, "finish_reason");
    if (fr && !(c->finish_reason = dup_s(fr))) return KM_ENOMEM;
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (cJSON_IsArray(calls) && parse_openai_calls(calls, c)) return KM_ENOMEM;
  }
  const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
  if (cJSON_IsObject(usage)) {
    r->has_usage = 1;
    get_count(usage, "prompt_tokens", &r->prompt_tokens);
    get_count(usage, "completion_tokens", &r->completion_tokens);
    if (!get_count(usage, "total_tokens", &r->total_tokens))
      r->total_tokens = r->prompt_tokens + r->completion_tokens;
    const cJSON *det = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens_details");
    r->has_reasoning_tokens = get_count(det, "reasoning_tokens", &r->reasoning_tokens);
  }
  return KM_OK;
}

static const char *anthropic_finish(const char *stop) {
  if (!stop) return NULL;
  if (!strcmp(stop, "end_turn") || !strcmp(stop, "stop_sequence")) return "stop";
  if (!strcmp(stop, "max_tokens")) return "length";
  if (!strcmp(stop, "tool_use")) return "tool_calls";
  return stop;
}

static int parse_anthropic(const cJSON *root, const char *body, size_t n, km_llm_response *r,
                           char *err, size_t errn) {
  const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
  if (!cJSON_IsArray(content)) {
    if (!embedded_error(root, body, n, "content", err, errn))
      set_err(err, errn, "response has no 'content' list");
    return KM_ECORRUPT;
  }
  r->choices = calloc(1, sizeof *r->choices);
  if (!r->choices) return KM_ENOMEM;
  r->n_choices = 1;
  km_llm_choice *c = r->choices;
  sbuf text = {0}, thinking = {0};
  sb_add(&text, "", 0);
  size_t n_tools = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, content) {
    const char *type = get_str(b, "type");
    if (type && !strcmp(type, "tool_use")) n_tools++;
  }
  if (n_tools && !(c->calls = calloc(n_tools, sizeof *c->calls))) {
    free(text.s);
    return KM_ENOMEM;
  }
  int status = KM_OK;
  cJSON_ArrayForEach(b, content) {
    const char *type = get_str(b, "type");
    if (!type) continue;
    if (!strcmp(type, "text")) {
      const char *t = get_str(b, "text");
      if (t) sb_adds(&text, t);
    } else if (!strcmp(type, "thinking")) {
      const char *t = get_str(b, "thinking");
      if (!t) continue;
      if (thinking.n) sb_adds(&thinking, "\n\n");
      sb_adds(&thinking, t);
    } else if (!strcmp(type, "tool_use")) {
      km_llm_call_out *o = &c->calls[c->n_calls++];
      const char *id = get_str(b, "id"), *name = get_str(b, "name");
      const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
      o->id = dup_s(id ? id : "");
      o->name = dup_s(name ? name : "");
      o->arguments = input ? cJSON_PrintUnformatted(input) : dup_s("{}");
      if (!o->id || !o->name || !o->arguments) status = KM_ENOMEM;
    }
  }
  c->content = text.s;
  if (thinking.n) c->reasoning = thinking.s;
  else free(thinking.s);
  if (text.oom || thinking.oom || status) return KM_ENOMEM;
  const char *fr = anthropic_finish(get_str(root, "stop_reason"));
  if (fr && !(c->finish_reason = dup_s(fr))) return KM_ENOMEM;
  const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
  if (cJSON_IsObject(usage)) {
    long long in = 0, cache_w = 0, cache_r = 0;
    r->has_usage = 1;
    get_count(usage, "input_tokens", &in);
    /* Cached prompt tokens are still prompt tokens (priced the same here, see docs). */
    get_count(usage, "cache_creation_input_tokens", &cache_w);
    get_count(usage, "cache_read_input_tokens", &cache_r);
    r->prompt_tokens = in + cache_w + cache_r;
    get_count(usage, "output_tokens", &r->completion_tokens);
    r->total_tokens = r->prompt_tokens + r->completion_tokens;
  }
  return KM_OK;
}

int km_llm_parse_response(km_llm_api api, const char *body, size_t n, km_llm_response *r,
                          char *err, size_t errn) {
  memset(r, 0, sizeof *r);
  set_err(err, errn, "%s", "");
  const km_llm_provider *pv = provider_of(api);
  if (!pv || !pv->parse) {
    set_err(err, errn, "provider %s reads no replies", pv ? pv->name : "?");
    return KM_EINVAL;
  }
  cJSON *root;
  int rc = parse_root(body, n, &root, err, errn);
  if (rc) return rc;
  rc = pv->parse(root, body, n, r, err, errn);
  const char *model = get_str(root, "model");
  if (!rc && model && !(r->model = dup_s(model))) rc = KM_ENOMEM;
  cJSON_Delete(root);
  if (rc == KM_ENOMEM) set_err(err, errn, "out of memory reading the response");
  if (rc) km_llm_response_free(r);
  return rc;
}

/* ---- providers ----
 *
 * One row per provider; km_llm.c reads them and names none. A server that speaks one of
 * the APIs below (an OpenAI-compatible host, a proxy) is a row with its own name, variables
 * and base URL and the same body and parse functions; another API is a pair of them. */

const km_llm_provider km_llm_providers[] = {
    /* OpenAI chat completions: OpenAI itself, vLLM, SGLang, llama.cpp, Ollama, ... The
     * base carries its /v1 by convention, so there is no prefix. */
    {.name = "openai", .flags = KM_LLM_PICK_URL | KM_LLM_PICK_KEY | KM_LLM_PICK_NAMED,
     .key_env = "OPENAI_API_KEY", .url_env = "OPENAI_BASE_URL",
     .base_url = "https://api.openai.com/v1", .hint = "OPENAI_BASE_URL",
     .prefix = "", .path = "/chat/completions", .models_path = "/models",
     .auth_header = "Authorization", .auth_prefix = "Bearer ",
     .body = openai_body, .parse = parse_openai},
    /* Anthropic Messages: its base has no /v1 by convention (its SDKs); one that has it is
     * accepted too. No n: n choices are n requests. */
    {.name = "anthropic", .flags = KM_LLM_PICK_KEY | KM_LLM_PER_N,
     .key_env = "ANTHROPIC_API_KEY", .url_env = "ANTHROPIC_BASE_URL",
     .base_url = "https://api.anthropic.com", .hint = "ANTHROPIC_API_KEY",
     .prefix = "/v1", .path = "/messages", .models_path = "/models",
     .auth_header = "x-api-key", .auth_prefix = "",
     .version_header = "anthropic-version", .version_field = "anthropic_version",
     .version_default = "2023-06-01",
     .body = anthropic_body, .parse = parse_anthropic},
    /* Recorded replies, played back in order. */
    {.name = "replay", .flags = KM_LLM_REPLAYS},
    /* No model: every request fails with OFFLINE, so a strategy's other parts still run. */
    {.name = "offline", .flags = KM_LLM_FALLBACK, .fail_code = "OFFLINE",
     .fail_format = "offline: no model configured (set %s, or KM_MODEL)"},
};
const size_t km_llm_n_providers = sizeof km_llm_providers / sizeof *km_llm_providers;

static const km_llm_provider *provider_of(km_llm_api api) {
  return (size_t)api < km_llm_n_providers ? &km_llm_providers[api] : NULL;
}

int km_llm_provider_find(const char *name) {
  for (size_t i = 0; name && i < km_llm_n_providers; i++)
    if (!strcmp(name, km_llm_providers[i].name)) return (int)i;
  return -1;
}

void km_llm_provider_list(int hints, char *out, size_t outn) {
  if (!outn) return;
  const char *items[16];
  size_t n = 0;
  for (size_t i = 0; i < km_llm_n_providers && n < sizeof items / sizeof *items; i++) {
    const char *s = hints ? km_llm_providers[i].hint : km_llm_providers[i].name;
    if (s) items[n++] = s;
  }
  size_t o = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && o < outn; i++) {
    const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
    int k = snprintf(out + o, outn - o, "%s%s", sep, items[i]);
    if (k < 0) break;
    o += (size_t)k;
  }
}

static int ends_with(const char *s, size_t n, const char *tail) {
  size_t k = strlen(tail);
  return n >= k && !memcmp(s + n - k, tail, k);
}

size_t km_llm_url(km_llm_api api, const char *base, const char *path, int whole, char *out,
                  size_t outn) {
  const km_llm_provider *pv = provider_of(api);
  const char *prefix = pv && pv->prefix ? pv->prefix : "";
  size_t n = strlen(base);
  while (n && base[n - 1] == '/') n--;
  const char *a = prefix, *b = path; /* what goes after the base */
  if (whole && ends_with(base, n, path) && ends_with(base, n - strlen(path), prefix)) a = b = "";
  else if (ends_with(base, n, prefix)) a = "";
  int k = snprintf(out, outn, "%.*s%s%s", (int)n, base, a, b);
  return k < 0 ? 0 : (size_t)k;
}

/* ---- errors, keys ---- */

/* Copies s into out as one line: whitespace runs become one space, control bytes go, and
 * the text is cut at KM_LLM_ERROR_TEXT_MAX bytes with "...". */
static void one_line(const char *s, size_t n, char *out, size_t outn) {
  if (!outn) return;
  size_t limit = outn - 1 < KM_LLM_ERROR_TEXT_MAX ? outn - 1 : KM_LLM_ERROR_TEXT_MAX;
  size_t o = 0, i = 0;
  int space = 0;
  while (i < n && isspace((unsigned char)s[i])) i++;
  for (; i < n && o < limit; i++) {
    unsigned char c = (unsigned char)s[i];
    if (isspace(c)) {
      space = 1;
      continue;
    }
    if (c < 0x20 || c == 0x7f) continue;
    if (space && o) {
      out[o++] = ' ';
      if (o >= limit) break;
    }
    space = 0;
    out[o++] = (char)c;
  }
  while (i < n && isspace((unsigned char)s[i])) i++;
  if (i < n && limit >= 3) {
    o = o > limit - 3 ? limit - 3 : o;
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
}

void km_llm_error_text(const char *body, size_t n, char *out, size_t outn) {
  if (!outn) return;
  if (!body || !n) {
    snprintf(out, outn, "(empty body)");
    return;
  }
  cJSON *root = cJSON_ParseWithLength(body, n);
  const char *msg = NULL;
  if (cJSON_IsObject(root)) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (cJSON_IsString(e)) msg = e->valuestring;
    else if (cJSON_IsObject(e)) msg = get_str(e, "message");
    if (!msg) msg = get_str(root, "message");
    if (!msg) msg = get_str(root, "detail");
  }
  if (msg) one_line(msg, strlen(msg), out, outn);
  else one_line(body, n, out, outn);
  cJSON_Delete(root);
}

void km_llm_error_code(const char *body, size_t n, char *out, size_t outn) {
  if (!outn) return;
  out[0] = '\0';
  if (!body || !n) return;
  cJSON *root = cJSON_ParseWithLength(body, n);
  if (cJSON_IsObject(root)) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    const char *code = cJSON_IsObject(e) ? get_str(e, "code") : NULL;
    if (!code && cJSON_IsObject(e)) code = get_str(e, "type"); /* Anthropic: error.type */
    /* a short word only: [A-Za-z0-9_.-], as OpenAI's codes are */
    size_t k = 0;
    for (; code && code[k] && k + 1 < outn && k < 64; k++) {
      char c = code[k];
      if (!(isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.')) break;
      out[k] = c;
    }
    out[code && !code[k] ? k : 0] = '\0';
  }
  cJSON_Delete(root);
}

void km_llm_http_error(km_llm_api api, long status, const char *body, size_t n, int has_key,
                       char *out, size_t outn) {
  const km_llm_provider *pv = provider_of(api);
  const char *var = pv && pv->key_env ? pv->key_env : "the API key";
  if (status == 401 && has_key) {
    snprintf(out, outn, "HTTP 401: the server rejected the API key (check %s)", var);
  } else if (status == 401) {
    snprintf(out, outn, "HTTP 401: the server wants an API key and none is set (set %s)", var);
  } else if (status == 403) {
    snprintf(out, outn,
             "HTTP 403: the server refused access with this API key (check %s and the model)", var);
  } else {
    char text[KM_LLM_ERROR_TEXT_MAX + 8];
    km_llm_error_text(body, n, text, sizeof text);
    snprintf(out, outn, "HTTP %ld: %s", status, text);
  }
}

size_t km_llm_scrub(char *s, size_t n, const char *key) {
  size_t k = key ? strlen(key) : 0, count = 0;
  if (!s || k < KM_LLM_SCRUB_MIN) return 0;
  char *p = s, *end = s + n;
  while ((p = memmem(p, (size_t)(end - p), key, k))) {
    memset(p, '*', k);
    p += k;
    count++;
  }
  return count;
}

static void scrub_str(char *s, const char *key) {
  if (s) km_llm_scrub(s, strlen(s), key);
}

void km_llm_response_scrub(km_llm_response *r, const char *key) {
  scrub_str(r->model, key);
  for (size_t i = 0; i < r->n_choices; i++) {
    km_llm_choice *c = &r->choices[i];
    scrub_str(c->content, key);
    scrub_str(c->reasoning, key);
    scrub_str(c->finish_reason, key);
    for (size_t k = 0; k < c->n_calls; k++) {
      scrub_str(c->calls[k].id, key);
      scrub_str(c->calls[k].name, key);
      scrub_str(c->calls[k].arguments, key);
    }
  }
}

/* ---- retry policy ---- */

int km_llm_retryable(km_llm_net net, long status) {
  switch (net) {
  case KM_LLM_NET_OK: return status == 429 || (status >= 500 && status <= 599);
  case KM_LLM_NET_TIMEOUT:
  case KM_LLM_NET_CONNECT_TIMEOUT:
  case KM_LLM_NET_RESET: return 1;
  /* Nothing listening is a configuration problem: retrying would only delay the message. */
  case KM_LLM_NET_REFUSED:
  case KM_LLM_NET_TOO_LARGE:
  case KM_LLM_NET_OTHER: return 0;
  }
  return 0;
}

double km_llm_backoff(int retry, double base, double cap, double u) {
  if (retry < 1 || !(base > 0) || !(cap > 0)) return 0;
  if (u < 0) u = 0;
  if (u >= 1) u = nextafter(1.0, 0.0);
  double ceiling = retry > 60 ? cap : ldexp(base, retry - 1);
  if (ceiling > cap) ceiling = cap;
  return u * ceiling;
}

static const char *const MONTHS[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

double km_llm_parse_retry_after(const char *v, double now) {
  if (!v) return -1;
  while (isspace((unsigned char)*v)) v++;
  if (!*v) return -1;
  if (isdigit((unsigned char)*v)) {
    char *end;
    double s = strtod(v, &end);
    while (isspace((unsigned char)*end)) end++;
    if (*end || !isfinite(s) || s < 0) return -1;
    return s;
  }
  /* IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT"; parsed by hand so the locale cannot
   * change the month names. */
  char mon[4];
  int day, year, hh, mm, ss, used = 0;
  if (sscanf(v, "%*3[A-Za-z], %d %3[A-Za-z] %d %d:%d:%d GMT%n", &day, mon, &year, &hh, &mm,
             &ss, &used) != 6 || !used)
    return -1;
  struct tm tm = {0};
  tm.tm_mon = -1;
  for (int i = 0; i < 12; i++)
    if (!strcasecmp(mon, MONTHS[i])) tm.tm_mon = i;
  if (tm.tm_mon < 0 || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60) return -1;
  tm.tm_mday = day;
  tm.tm_year = year - 1900;
  tm.tm_hour = hh;
  tm.tm_min = mm;
  tm.tm_sec = ss;
  double at = (double)timegm(&tm);
  return at > now ? at - now : 0;
}

double km_llm_retry_delay(int retry, double base, double cap, double retry_after, double u) {
  if (retry_after >= 0) return retry_after < cap ? retry_after : cap;
  return km_llm_backoff(retry, base, cap, u);
}

/* ---- cost and budget ---- */

double km_llm_cost(long long prompt_tokens, long long completion_tokens, double input_per_m,
                   double output_per_m) {
  return ((double)prompt_tokens * input_per_m + (double)completion_tokens * output_per_m) / 1e6;
}

const char *km_llm_budget_check(const km_llm_budget *limit, const km_llm_spent *spent,
                                long long more) {
  if (limit->requests >= 0 && spent->requests + more > limit->requests) return "requests";
  if (limit->tokens >= 0 && spent->tokens >= limit->tokens) return "tokens";
  if (limit->dollars >= 0 && spent->dollars >= limit->dollars) return "dollars";
  return NULL;
}

/* ---- strict JSON (tool-call arguments) ----
 *
 * A recursive-descent check of RFC 8259, stricter than cJSON (which takes raw control
 * characters inside strings, "01", "1.", "+1"): what a model sends as tool arguments must
 * be what every consumer of an export can read (Python's json.loads among them). */

typedef struct {
  const char *s;
  size_t n, pos;
  int depth;
  const char *why;
} jscan;

static void jws(jscan *j) {
  while (j->pos < j->n && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' || j->s[j->pos] == '\n' ||
                           j->s[j->pos] == '\r'))
    j->pos++;
}

static int jfail(jscan *j, const char *why) {
  if (!j->why) j->why = why;
  return 0;
}

static int jvalue(jscan *j);

static int jhex4(jscan *j) {
  for (int k = 0; k < 4; k++, j->pos++)
    if (j->pos >= j->n || !isxdigit((unsigned char)j->s[j->pos])) return jfail(j, "a bad \\u escape");
  return 1;
}

static int jstring(jscan *j) {
  j->pos++; /* the opening quote */
  while (j->pos < j->n) {
    unsigned char c = (unsigned char)j->s[j->pos];
    if (c == '"') {
      j->pos++;
      return 1;
    }
    if (c < 0x20) return jfail(j, c == '\n' ? "a raw newline inside a string (write \\n)"
                                            : "a raw control character inside a string");
    if (c == '\\') {
      j->pos++;
      if (j->pos >= j->n) break;
      c = (unsigned char)j->s[j->pos];
      if (c == 'u') {
        j->pos++;
        if (!jhex4(j)) return 0;
        continue;
      }
      if (!strchr("\"\\/bfnrt", c) || !c) return jfail(j, "an invalid escape in a string");
    }
    j->pos++;
  }
  return jfail(j, "an unterminated string");
}

static int jdigits(jscan *j) {
  size_t p0 = j->pos;
  while (j->pos < j->n && isdigit((unsigned char)j->s[j->pos])) j->pos++;
  return j->pos > p0;
}

static int jnumber(jscan *j) {
  if (j->s[j->pos] == '-') j->pos++;
  if (j->pos < j->n && j->s[j->pos] == '0') {
    j->pos++;
    if (j->pos < j->n && isdigit((unsigned char)j->s[j->pos])) return jfail(j, "a bad number (leading zero)");
  } else if (!jdigits(j)) return jfail(j, "a bad number");
  if (j->pos < j->n && j->s[j->pos] == '.') {
    j->pos++;
    if (!jdigits(j)) return jfail(j, "a bad number");
  }
  if (j->pos < j->n && (j->s[j->pos] == 'e' || j->s[j->pos] == 'E')) {
    j->pos++;
    if (j->pos < j->n && (j->s[j->pos] == '+' || j->s[j->pos] == '-')) j->pos++;
    if (!jdigits(j)) return jfail(j, "a bad number");
  }
  return 1;
}

static int jword(jscan *j, const char *w) {
  size_t k = strlen(w);
  if (j->n - j->pos < k || memcmp(j->s + j->pos, w, k)) return jfail(j, "an unexpected word");
  j->pos += k;
  return 1;
}

static int jcontainer(jscan *j, char close) {
  if (++j->depth > 512) return jfail(j, "nesting too deep");
  j->pos++;
  jws(j);
  if (j->pos < j->n && j->s[j->pos] == close) {
    j->pos++;
    j->depth--;
    return 1;
  }
  for (;;) {
    jws(j);
    if (close == '}') {
      if (j->pos >= j->n || j->s[j->pos] != '"') return jfail(j, "an object key that is not a string");
      if (!jstring(j)) return 0;
      jws(j);
      if (j->pos >= j->n || j->s[j->pos] != ':') return jfail(j, "a missing ':' after a key");
      j->pos++;
    }
    if (!jvalue(j)) return 0;
    jws(j);
    if (j->pos < j->n && j->s[j->pos] == ',') {
      j->pos++;
      continue;
    }
    if (j->pos < j->n && j->s[j->pos] == close) {
      j->pos++;
      j->depth--;
      return 1;
    }
    return jfail(j, j->pos >= j->n ? "unexpected end of input" : "a missing ',' or closing bracket");
  }
}

static int jvalue(jscan *j) {
  jws(j);
  if (j->pos >= j->n) return jfail(j, "unexpected end of input");
  char c = j->s[j->pos];
  if (c == '{') return jcontainer(j, '}');
  if (c == '[') return jcontainer(j, ']');
  if (c == '"') return jstring(j);
  if (c == '-' || isdigit((unsigned char)c)) return jnumber(j);
  if (c == 't') return jword(j, "true");
  if (c == 'f') return jword(j, "false");
  if (c == 'n') return jword(j, "null");
  return jfail(j, "an unexpected character");
}

int km_llm_json_strict(const char *s, size_t n, int want_object, char *err, size_t errn) {
  jscan j = {s ? s : "", s ? n : 0, 0, 0, NULL};
  jws(&j);
  if (want_object && (j.pos >= j.n || j.s[j.pos] != '{')) {
    set_err(err, errn, "the arguments are not a JSON object");
    return KM_EINVAL;
  }
  if (jvalue(&j)) {
    jws(&j);
    if (j.pos == j.n) return KM_OK;
    j.why = "text after the value";
  }
  set_err(err, errn, "invalid JSON: %s at byte %zu", j.why ? j.why : "bad syntax", j.pos + 1);
  return KM_EINVAL;
}
