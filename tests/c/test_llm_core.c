/* test_llm_core.c — the model client's pure C core: request JSON for both APIs, response
 * parsing and its errors, server error text, key scrubbing, the retry policy (backoff
 * bounds, Retry-After), cost and budget. Requests are checked by parsing them back. */
#include <stdlib.h>
#include <cJSON.h>
#include "test.h"
#include "km_llm_core.h"
#include "km_utf8_core.h"

/* Builds a request and parses it back; NULL (and the test fails) when either step fails. */
static cJSON *build(km_llm_api api, const km_llm_message *m, size_t n, const km_llm_params *p) {
  char *text = NULL, err[256];
  int rc = km_llm_build_request(api, m, n, p, &text, err, sizeof err);
  if (rc) {
    printf("# build failed: %s\n", err);
    return NULL;
  }
  cJSON *root = cJSON_Parse(text);
  km_llm_free(text);
  return root;
}

static const cJSON *at(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static const cJSON *idx(const cJSON *a, int i) { return cJSON_GetArrayItem(a, i); }
static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = at(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
static double num(const cJSON *o, const char *k) {
  const cJSON *v = at(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

static const km_llm_tool TOOL = {"compile", "Compile a kernel",
                                 "{\"type\":\"object\",\"properties\":{\"src\":{\"type\":\"string\"}}}"};

/* ---- OpenAI requests ---- */

TEST(openai_request_fields) {
  km_llm_message m[] = {{"system", "Be brief.", NULL, 0, NULL}, {"user", "write relu", NULL, 0, NULL}};
  const char *stop[] = {"END", "</code>"};
  km_llm_params p = {.model = "gpt-x", .has_temperature = 1, .temperature = 0.7, .max_tokens = 256,
                     .n = 3, .stop = stop, .n_stop = 2, .has_seed = 1, .seed = 42};
  cJSON *r = build(KM_LLM_OPENAI, m, 2, &p);
  ASSERT(r);
  ASSERT_EQ_STR(str(r, "model"), "gpt-x");
  ASSERT_NEAR(num(r, "temperature"), 0.7, 0);
  ASSERT_EQ_INT(num(r, "max_tokens"), 256);
  ASSERT_EQ_INT(num(r, "n"), 3);
  ASSERT_EQ_INT(num(r, "seed"), 42);
  ASSERT_EQ_STR(idx(at(r, "stop"), 1)->valuestring, "</code>");
  const cJSON *msgs = at(r, "messages");
  ASSERT_EQ_INT(cJSON_GetArraySize(msgs), 2);
  ASSERT_EQ_STR(str(idx(msgs, 0), "role"), "system");
  ASSERT_EQ_STR(str(idx(msgs, 1), "content"), "write relu");
  cJSON_Delete(r);
}

TEST(openai_request_leaves_out_what_is_unset) {
  km_llm_message m[] = {{"user", NULL, NULL, 0, NULL}};
  km_llm_params p = {.n = 1};
  cJSON *r = build(KM_LLM_OPENAI, m, 1, &p);
  ASSERT(r);
  ASSERT(!at(r, "model"));
  ASSERT(!at(r, "n"));
  ASSERT(!at(r, "max_tokens"));
  ASSERT(!at(r, "temperature"));
  ASSERT(!at(r, "seed"));
  ASSERT(!at(r, "stop"));
  ASSERT(!at(r, "tools"));
  ASSERT_EQ_STR(str(idx(at(r, "messages"), 0), "content"), "");
  cJSON_Delete(r);
}

TEST(openai_request_tools_and_tool_messages) {
  km_llm_call calls[] = {{"call_1", "compile", "{\"src\":\"k\"}"}, {"call_2", "run", NULL}};
  km_llm_message m[] = {
      {"user", "go", NULL, 0, NULL},
      {"assistant", NULL, calls, 2, NULL},
      {"tool", "ok", NULL, 0, "call_1"},
  };
  km_llm_tool tools[] = {TOOL, {"run", NULL, NULL}};
  km_llm_params p = {.tools = tools, .n_tools = 2, .tool_choice = "compile"};
  cJSON *r = build(KM_LLM_OPENAI, m, 3, &p);
  ASSERT(r);
  const cJSON *a = idx(at(r, "messages"), 1);
  ASSERT(cJSON_IsNull(at(a, "content")));
  const cJSON *tc = idx(at(a, "tool_calls"), 0);
  ASSERT_EQ_STR(str(tc, "id"), "call_1");
  ASSERT_EQ_STR(str(tc, "type"), "function");
  ASSERT_EQ_STR(str(at(tc, "function"), "arguments"), "{\"src\":\"k\"}");
  ASSERT_EQ_STR(str(at(idx(at(a, "tool_calls"), 1), "function"), "arguments"), "{}");
  const cJSON *tm = idx(at(r, "messages"), 2);
  ASSERT_EQ_STR(str(tm, "role"), "tool");
  ASSERT_EQ_STR(str(tm, "tool_call_id"), "call_1");
  const cJSON *t0 = idx(at(r, "tools"), 0);
  ASSERT_EQ_STR(str(t0, "type"), "function");
  ASSERT_EQ_STR(str(at(t0, "function"), "description"), "Compile a kernel");
  ASSERT_EQ_STR(str(at(at(at(at(t0, "function"), "parameters"), "properties"), "src"), "type"), "string");
  ASSERT(!at(at(idx(at(r, "tools"), 1), "function"), "parameters"));
  ASSERT_EQ_STR(str(at(at(r, "tool_choice"), "function"), "name"), "compile");
  cJSON_Delete(r);
  p.tool_choice = "required";
  r = build(KM_LLM_OPENAI, m, 3, &p);
  ASSERT_EQ_STR(str(r, "tool_choice"), "required");
  cJSON_Delete(r);
}

/* ---- Anthropic requests ---- */

TEST(anthropic_request_translation) {
  km_llm_call calls[] = {{"call_1", "compile", "{\"src\":\"k\"}"}, {"call_2", "compile", "not json"}};
  km_llm_message m[] = {
      {"system", "Rule A.", NULL, 0, NULL},
      {"user", "write relu", NULL, 0, NULL},
      {"system", "Rule B.", NULL, 0, NULL},
      {"assistant", "Trying.", calls, 2, NULL},
      {"tool", "ok", NULL, 0, "call_1"},
      {"tool", "failed", NULL, 0, "call_2"},
      {"user", "fix it", NULL, 0, NULL},
      {"assistant", "Done.", NULL, 0, NULL},
  };
  const char *stop[] = {"STOP"};
  km_llm_params p = {.model = "claude-x", .stop = stop, .n_stop = 1, .has_seed = 1, .seed = 1,
                     .n = 4, .tools = &TOOL, .n_tools = 1, .tool_choice = "required"};
  cJSON *r = build(KM_LLM_ANTHROPIC, m, 8, &p);
  ASSERT(r);
  ASSERT_EQ_STR(str(r, "system"), "Rule A.\n\nRule B.");
  ASSERT_EQ_INT(num(r, "max_tokens"), KM_LLM_DEFAULT_MAX_TOKENS);
  ASSERT(!at(r, "seed"));
  ASSERT(!at(r, "n"));
  ASSERT_EQ_STR(idx(at(r, "stop_sequences"), 0)->valuestring, "STOP");
  const cJSON *msgs = at(r, "messages");
  ASSERT_EQ_INT(cJSON_GetArraySize(msgs), 4);
  ASSERT_EQ_STR(str(idx(msgs, 0), "content"), "write relu");
  const cJSON *a = at(idx(msgs, 1), "content");
  ASSERT_EQ_STR(str(idx(msgs, 1), "role"), "assistant");
  ASSERT_EQ_INT(cJSON_GetArraySize(a), 3);
  ASSERT_EQ_STR(str(idx(a, 0), "text"), "Trying.");
  ASSERT_EQ_STR(str(idx(a, 1), "type"), "tool_use");
  ASSERT_EQ_STR(str(at(idx(a, 1), "input"), "src"), "k");
  ASSERT(cJSON_IsObject(at(idx(a, 2), "input"))); /* bad arguments become {} */
  ASSERT_EQ_INT(cJSON_GetArraySize(at(idx(a, 2), "input")), 0);
  const cJSON *u = at(idx(msgs, 2), "content");
  ASSERT_EQ_STR(str(idx(msgs, 2), "role"), "user");
  ASSERT_EQ_INT(cJSON_GetArraySize(u), 3);
  ASSERT_EQ_STR(str(idx(u, 0), "type"), "tool_result");
  ASSERT_EQ_STR(str(idx(u, 0), "tool_use_id"), "call_1");
  ASSERT_EQ_STR(str(idx(u, 1), "content"), "failed");
  ASSERT_EQ_STR(str(idx(u, 2), "text"), "fix it");
  ASSERT_EQ_STR(str(idx(msgs, 3), "content"), "Done.");
  const cJSON *t0 = idx(at(r, "tools"), 0);
  ASSERT_EQ_STR(str(t0, "name"), "compile");
  ASSERT_EQ_STR(str(at(t0, "input_schema"), "type"), "object");
  ASSERT_EQ_STR(str(at(r, "tool_choice"), "type"), "any");
  cJSON_Delete(r);
}

TEST(anthropic_request_merges_turns_and_defaults) {
  km_llm_message m[] = {{"user", "a", NULL, 0, NULL}, {"user", "b", NULL, 0, NULL}};
  km_llm_tool bare = {"noargs", NULL, NULL};
  km_llm_params p = {.max_tokens = 99, .tools = &bare, .n_tools = 1, .tool_choice = "noargs"};
  cJSON *r = build(KM_LLM_ANTHROPIC, m, 2, &p);
  ASSERT(r);
  ASSERT_EQ_INT(num(r, "max_tokens"), 99);
  ASSERT(!at(r, "model"));
  ASSERT(!at(r, "system"));
  const cJSON *msgs = at(r, "messages");
  ASSERT_EQ_INT(cJSON_GetArraySize(msgs), 1);
  const cJSON *c = at(idx(msgs, 0), "content");
  ASSERT_EQ_STR(str(idx(c, 0), "text"), "a");
  ASSERT_EQ_STR(str(idx(c, 1), "text"), "b");
  ASSERT_EQ_STR(str(at(idx(at(r, "tools"), 0), "input_schema"), "type"), "object");
  ASSERT_EQ_STR(str(at(r, "tool_choice"), "type"), "tool");
  ASSERT_EQ_STR(str(at(r, "tool_choice"), "name"), "noargs");
  cJSON_Delete(r);
}

TEST(request_extra_fields) {
  km_llm_message m[] = {{"user", "x", NULL, 0, NULL}};
  km_llm_params p = {.model = "m", .has_temperature = 1, .temperature = 0.2,
                     .extra = "{\"temperature\":0.9,\"top_p\":0.5,\"thinking\":{\"type\":\"enabled\"}}"};
  cJSON *r = build(KM_LLM_ANTHROPIC, m, 1, &p);
  ASSERT(r);
  ASSERT_NEAR(num(r, "temperature"), 0.9, 0);
  ASSERT_NEAR(num(r, "top_p"), 0.5, 0);
  ASSERT_EQ_STR(str(at(r, "thinking"), "type"), "enabled");
  ASSERT_EQ_STR(str(r, "model"), "m");
  int temps = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, r) temps += !strcmp(it->string, "temperature");
  ASSERT_EQ_INT(temps, 1);
  cJSON_Delete(r);
  char *text, err[64];
  p.extra = "[1]";
  ASSERT_EQ_INT(km_llm_build_request(KM_LLM_OPENAI, m, 1, &p, &text, err, sizeof err), KM_EINVAL);
  ASSERT_EQ_STR(err, "extra: not a JSON object");
}

TEST(request_errors) {
  char *text = (char *)1, err[128];
  km_llm_message m[] = {{"user", "x", NULL, 0, NULL}, {"robot", "x", NULL, 0, NULL}};
  km_llm_params p = {0};
  ASSERT_EQ_INT(km_llm_build_request(KM_LLM_OPENAI, m, 2, &p, &text, err, sizeof err), KM_EINVAL);
  ASSERT(text == NULL);
  ASSERT_EQ_STR(err, "message 2: unknown role 'robot'");
  km_llm_tool bad = {"t", NULL, "{not json"};
  km_llm_params q = {.tools = &bad, .n_tools = 1};
  ASSERT_EQ_INT(km_llm_build_request(KM_LLM_ANTHROPIC, m, 1, &q, &text, err, sizeof err), KM_EINVAL);
  ASSERT_EQ_STR(err, "tool 't': parameters are not valid JSON");
  ASSERT_EQ_INT(km_llm_build_request(KM_LLM_OPENAI, m, 1, &q, &text, err, sizeof err), KM_EINVAL);
}

/* ---- responses ---- */

static int parse(km_llm_api api, const char *body, km_llm_response *r, char *err, size_t errn) {
  return km_llm_parse_response(api, body, strlen(body), r, err, errn);
}

TEST(parse_openai_reply) {
  const char *body =
      "{\"model\":\"m1\",\"choices\":["
      "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\",\"reasoning_content\":\"hmm\","
      "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},"
      "\"finish_reason\":\"tool_calls\"},"
      "{\"index\":1,\"message\":{\"content\":null,\"reasoning\":\"alt\"},\"finish_reason\":\"length\"}],"
      "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,"
      "\"completion_tokens_details\":{\"reasoning_tokens\":3}}}";
  km_llm_response r;
  char err[256];
  ASSERT_EQ_INT(parse(KM_LLM_OPENAI, body, &r, err, sizeof err), KM_OK);
  ASSERT_EQ_INT(r.n_choices, 2);
  ASSERT_EQ_STR(r.model, "m1");
  ASSERT_EQ_STR(r.choices[0].content, "hi");
  ASSERT_EQ_STR(r.choices[0].reasoning, "hmm");
  ASSERT_EQ_STR(r.choices[0].finish_reason, "tool_calls");
  ASSERT_EQ_INT(r.choices[0].n_calls, 1);
  ASSERT_EQ_STR(r.choices[0].calls[0].id, "c1");
  ASSERT_EQ_STR(r.choices[0].calls[0].name, "f");
  ASSERT_EQ_STR(r.choices[0].calls[0].arguments, "{\"a\":1}");
  ASSERT_EQ_STR(r.choices[1].content, "");
  ASSERT_EQ_STR(r.choices[1].reasoning, "alt");
  ASSERT_EQ_STR(r.choices[1].finish_reason, "length");
  ASSERT_EQ_INT(r.prompt_tokens, 10);
  ASSERT_EQ_INT(r.completion_tokens, 5);
  ASSERT_EQ_INT(r.total_tokens, 15);
  ASSERT(r.has_reasoning_tokens);
  ASSERT_EQ_INT(r.reasoning_tokens, 3);
  km_llm_response_free(&r);
  km_llm_response_free(&r); /* idempotent */
}

TEST(parse_openai_lenient_shapes) {
  /* no usage, content as parts, arguments as an object, no total_tokens */
  const char *body = "{\"choices\":[{\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                     "{\"type\":\"text\",\"text\":\"b\"}],\"tool_calls\":[{\"function\":{\"name\":\"g\","
                     "\"arguments\":{\"x\":2}}}]}}],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3}}";
  km_llm_response r;
  char err[256];
  ASSERT_EQ_INT(parse(KM_LLM_OPENAI, body, &r, err, sizeof err), KM_OK);
  ASSERT_EQ_STR(r.choices[0].content, "ab");
  ASSERT_EQ_STR(r.choices[0].calls[0].arguments, "{\"x\":2}");
  ASSERT_EQ_STR(r.choices[0].calls[0].id, "");
  ASSERT(r.choices[0].finish_reason == NULL);
  ASSERT(r.model == NULL);
  ASSERT_EQ_INT(r.total_tokens, 5);
  ASSERT(!r.has_reasoning_tokens);
  km_llm_response_free(&r);
}

#define EXPECT_BAD(api, body, needle)                                            \
  do {                                                                           \
    km_llm_response r_;                                                          \
    char e_[256];                                                                \
    ASSERT_EQ_INT(parse(api, body, &r_, e_, sizeof e_), KM_ECORRUPT);            \
    if (!strstr(e_, needle)) T_FAIL("error \"%s\" lacks \"%s\"", e_, needle);    \
    ASSERT(r_.choices == NULL && r_.n_choices == 0);                             \
  } while (0)

TEST(parse_errors) {
  EXPECT_BAD(KM_LLM_OPENAI, "", "empty");
  EXPECT_BAD(KM_LLM_OPENAI, "<html>502</html>", "not valid JSON (error at byte 0");
  EXPECT_BAD(KM_LLM_OPENAI, "{\"choices\":[{\"message\":{\"content\":\"ab", "truncated");
  EXPECT_BAD(KM_LLM_OPENAI, "{\"choices\":[{\"mess", "truncated");
  EXPECT_BAD(KM_LLM_OPENAI, "{\"a\":1} trailing", "not valid JSON");
  EXPECT_BAD(KM_LLM_OPENAI, "[1,2]", "not a JSON object");
  EXPECT_BAD(KM_LLM_OPENAI, "{\"id\":\"x\"}", "no 'choices' list");
  EXPECT_BAD(KM_LLM_OPENAI, "{\"choices\":[]}", "empty 'choices' list");
  EXPECT_BAD(KM_LLM_OPENAI, "{\"choices\":[{\"text\":\"x\"}]}", "choice 1 has no 'message' object");
  EXPECT_BAD(KM_LLM_OPENAI, "{\"error\":{\"message\":\"model overloaded\"}}",
             "error instead of choices: model overloaded");
  EXPECT_BAD(KM_LLM_ANTHROPIC, "{\"type\":\"message\"}", "no 'content' list");
  EXPECT_BAD(KM_LLM_ANTHROPIC, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}",
             "error instead of content: busy");
}

TEST(parse_anthropic_reply) {
  const char *body =
      "{\"model\":\"claude-x\",\"content\":["
      "{\"type\":\"thinking\",\"thinking\":\"step 1\",\"signature\":\"s\"},"
      "{\"type\":\"text\",\"text\":\"Hello \"},{\"type\":\"text\",\"text\":\"there\"},"
      "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{\"a\":[1,2]}}],"
      "\"stop_reason\":\"tool_use\",\"usage\":{\"input_tokens\":7,\"cache_read_input_tokens\":3,"
      "\"output_tokens\":4}}";
  km_llm_response r;
  char err[256];
  ASSERT_EQ_INT(parse(KM_LLM_ANTHROPIC, body, &r, err, sizeof err), KM_OK);
  ASSERT_EQ_INT(r.n_choices, 1);
  ASSERT_EQ_STR(r.model, "claude-x");
  ASSERT_EQ_STR(r.choices[0].content, "Hello there");
  ASSERT_EQ_STR(r.choices[0].reasoning, "step 1");
  ASSERT_EQ_STR(r.choices[0].finish_reason, "tool_calls");
  ASSERT_EQ_INT(r.choices[0].n_calls, 1);
  ASSERT_EQ_STR(r.choices[0].calls[0].id, "toolu_1");
  ASSERT_EQ_STR(r.choices[0].calls[0].arguments, "{\"a\":[1,2]}");
  ASSERT_EQ_INT(r.prompt_tokens, 10);
  ASSERT_EQ_INT(r.completion_tokens, 4);
  ASSERT_EQ_INT(r.total_tokens, 14);
  km_llm_response_free(&r);
  static const char *const map[][2] = {{"end_turn", "stop"}, {"stop_sequence", "stop"},
                                       {"max_tokens", "length"}, {"refusal", "refusal"}};
  for (size_t i = 0; i < 4; i++) {
    char b[128];
    snprintf(b, sizeof b, "{\"content\":[],\"stop_reason\":\"%s\"}", map[i][0]);
    ASSERT_EQ_INT(parse(KM_LLM_ANTHROPIC, b, &r, err, sizeof err), KM_OK);
    ASSERT_EQ_STR(r.choices[0].finish_reason, map[i][1]);
    ASSERT_EQ_STR(r.choices[0].content, "");
    ASSERT(r.choices[0].reasoning == NULL);
    km_llm_response_free(&r);
  }
}

/* ---- errors and keys ---- */

TEST(error_text) {
  char out[KM_LLM_ERROR_TEXT_MAX + 8];
  const char *oa = "{\"error\":{\"message\":\"Rate limit\\nreached\",\"type\":\"x\"}}";
  km_llm_error_text(oa, strlen(oa), out, sizeof out);
  ASSERT_EQ_STR(out, "Rate limit reached");
  const char *an = "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"bad\"}}";
  km_llm_error_text(an, strlen(an), out, sizeof out);
  ASSERT_EQ_STR(out, "bad");
  const char *fa = "{\"detail\":\"Not Found\"}";
  km_llm_error_text(fa, strlen(fa), out, sizeof out);
  ASSERT_EQ_STR(out, "Not Found");
  const char *st = "{\"error\":\"plain\"}";
  km_llm_error_text(st, strlen(st), out, sizeof out);
  ASSERT_EQ_STR(out, "plain");
  const char *html = "  <html>\r\n  <h1>Bad\tGateway</h1>\n</html>\n";
  km_llm_error_text(html, strlen(html), out, sizeof out);
  ASSERT_EQ_STR(out, "<html> <h1>Bad Gateway</h1> </html>");
  km_llm_error_text("", 0, out, sizeof out);
  ASSERT_EQ_STR(out, "(empty body)");
  char big[1000];
  memset(big, 'x', sizeof big);
  km_llm_error_text(big, sizeof big, out, sizeof out);
  ASSERT_EQ_INT(strlen(out), KM_LLM_ERROR_TEXT_MAX);
  ASSERT(!strcmp(out + KM_LLM_ERROR_TEXT_MAX - 3, "..."));
  char tiny[8];
  km_llm_error_text(big, sizeof big, tiny, sizeof tiny);
  ASSERT_EQ_STR(tiny, "xxxx...");
}

TEST(http_error_lines) {
  char out[512];
  const char *body = "{\"error\":{\"message\":\"Incorrect API key provided: sk-abc\"}}";
  km_llm_http_error(KM_LLM_OPENAI, 401, body, strlen(body), 1, out, sizeof out);
  ASSERT_EQ_STR(out, "HTTP 401: the server rejected the API key (check OPENAI_API_KEY)");
  km_llm_http_error(KM_LLM_ANTHROPIC, 401, body, strlen(body), 0, out, sizeof out);
  ASSERT_EQ_STR(out, "HTTP 401: the server wants an API key and none is set (set ANTHROPIC_API_KEY)");
  km_llm_http_error(KM_LLM_OPENAI, 403, body, strlen(body), 1, out, sizeof out);
  ASSERT(strstr(out, "HTTP 403: ") == out && !strstr(out, "sk-abc"));
  const char *e = "{\"error\":{\"message\":\"model 'x' not found\"}}";
  km_llm_http_error(KM_LLM_OPENAI, 404, e, strlen(e), 1, out, sizeof out);
  ASSERT_EQ_STR(out, "HTTP 404: model 'x' not found");
}

TEST(scrub) {
  char s[] = "key sk-live-1234 and again sk-live-1234!";
  ASSERT_EQ_INT(km_llm_scrub(s, strlen(s), "sk-live-1234"), 2);
  ASSERT_EQ_STR(s, "key ************ and again ************!");
  char t[] = "abc";
  ASSERT_EQ_INT(km_llm_scrub(t, 3, "abc"), 0); /* shorter than KM_LLM_SCRUB_MIN */
  ASSERT_EQ_INT(km_llm_scrub(t, 3, NULL), 0);
  ASSERT_EQ_INT(km_llm_scrub(NULL, 0, "abcdef"), 0);
  km_llm_response r;
  char err[64];
  const char *body = "{\"model\":\"m-SECRETKEY\",\"choices\":[{\"message\":{\"content\":\"SECRETKEY\","
                     "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"\\\"SECRETKEY\\\"\"}}]}}]}";
  ASSERT_EQ_INT(parse(KM_LLM_OPENAI, body, &r, err, sizeof err), KM_OK);
  km_llm_response_scrub(&r, "SECRETKEY");
  ASSERT_EQ_STR(r.model, "m-*********");
  ASSERT_EQ_STR(r.choices[0].content, "*********");
  ASSERT_EQ_STR(r.choices[0].calls[0].arguments, "\"*********\"");
  km_llm_response_free(&r);
}

/* A tool result with raw bytes (launch code printed string.char(255)) must not make the body
 * invalid UTF-8: a server refuses such a body (HTTP 400) and the model would be blamed. */
TEST(request_is_valid_utf8) {
  km_llm_message m[] = {{"user", "caf\xe9 \xff\xfe ok \xc3\xa9 cut\xe2\x82", NULL, 0, NULL}};
  km_llm_params p = {.n = 1};
  for (int api = 0; api < 2; api++) {
    char *text = NULL, err[256];
    ASSERT_EQ_INT(km_llm_build_request(api ? KM_LLM_ANTHROPIC : KM_LLM_OPENAI, m, 1, &p, &text, err,
                                       sizeof err), KM_OK);
    ASSERT_EQ_INT(km_utf8_check(text, strlen(text)), strlen(text));
    cJSON *r = cJSON_Parse(text);
    km_llm_free(text);
    ASSERT(r);
    const cJSON *msg = idx(at(r, "messages"), 0);
    const char *c = str(msg, "content");
    if (!c) c = str(idx(at(msg, "content"), 0), "text");
    ASSERT_EQ_STR(c, "caf\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd ok \xc3\xa9 cut\xef\xbf\xbd\xef\xbf\xbd");
    cJSON_Delete(r);
  }
}

/* ---- retry policy ---- */

TEST(retryable) {
  ASSERT(km_llm_retryable(KM_LLM_NET_OK, 429));
  ASSERT(km_llm_retryable(KM_LLM_NET_OK, 500));
  ASSERT(km_llm_retryable(KM_LLM_NET_OK, 503));
  ASSERT(km_llm_retryable(KM_LLM_NET_OK, 529));
  ASSERT(!km_llm_retryable(KM_LLM_NET_OK, 200));
  ASSERT(!km_llm_retryable(KM_LLM_NET_OK, 400));
  ASSERT(!km_llm_retryable(KM_LLM_NET_OK, 401));
  ASSERT(!km_llm_retryable(KM_LLM_NET_OK, 404));
  ASSERT(km_llm_retryable(KM_LLM_NET_TIMEOUT, 0));
  ASSERT(km_llm_retryable(KM_LLM_NET_CONNECT_TIMEOUT, 0));
  ASSERT(km_llm_retryable(KM_LLM_NET_RESET, 0));
  ASSERT(!km_llm_retryable(KM_LLM_NET_REFUSED, 0));
  ASSERT(!km_llm_retryable(KM_LLM_NET_TOO_LARGE, 200));
  ASSERT(!km_llm_retryable(KM_LLM_NET_OTHER, 0));
}

TEST(backoff_bounds) {
  const double us[] = {0, 0.25, 0.5, 0.999999, 1.0, -3};
  for (int retry = 1; retry <= 40; retry++) {
    double ceiling = ldexp(1.0, retry - 1);
    if (ceiling > 60) ceiling = 60;
    for (size_t i = 0; i < sizeof us / sizeof *us; i++) {
      double d = km_llm_backoff(retry, 1.0, 60.0, us[i]);
      if (!(d >= 0 && d < ceiling + 1e-9))
        T_FAIL("retry %d u %g: %g not in [0, %g)", retry, us[i], d, ceiling);
    }
  }
  ASSERT_NEAR(km_llm_backoff(1, 1, 60, 0.5), 0.5, 1e-12);
  ASSERT_NEAR(km_llm_backoff(3, 1, 60, 0.5), 2.0, 1e-12);
  ASSERT_NEAR(km_llm_backoff(3, 0.25, 60, 0.5), 0.5, 1e-12);
  ASSERT_NEAR(km_llm_backoff(10, 1, 60, 0.5), 30.0, 1e-12);  /* capped at 60, then jittered */
  ASSERT_NEAR(km_llm_backoff(100000, 1, 60, 0.5), 30.0, 1e-12);
  ASSERT_EQ_INT(km_llm_backoff(1, 1, 60, 0), 0);
  ASSERT_EQ_INT(km_llm_backoff(0, 1, 60, 0.5), 0);
  ASSERT_EQ_INT(km_llm_backoff(2, 0, 60, 0.5), 0);
}

TEST(retry_after) {
  ASSERT_NEAR(km_llm_parse_retry_after("1", 0), 1, 0);
  ASSERT_NEAR(km_llm_parse_retry_after(" 2.5 \r\n", 0), 2.5, 0);
  ASSERT_NEAR(km_llm_parse_retry_after("0", 0), 0, 0);
  ASSERT_NEAR(km_llm_parse_retry_after("-1", 0), -1, 0);
  ASSERT_NEAR(km_llm_parse_retry_after("soon", 0), -1, 0);
  ASSERT_NEAR(km_llm_parse_retry_after("5s", 0), -1, 0);
  ASSERT_NEAR(km_llm_parse_retry_after("", 0), -1, 0);
  ASSERT_NEAR(km_llm_parse_retry_after(NULL, 0), -1, 0);
  const double at = 1445412480; /* Wed, 21 Oct 2015 07:28:00 GMT */
  ASSERT_NEAR(km_llm_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at - 30), 30, 0);
  ASSERT_NEAR(km_llm_parse_retry_after(" Wed, 21 Oct 2015 07:28:00 GMT\r\n", at - 1.5), 1.5, 1e-9);
  ASSERT_NEAR(km_llm_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at + 100), 0, 0);
  ASSERT_NEAR(km_llm_parse_retry_after("Wed, 21 Foo 2015 07:28:00 GMT", 0), -1, 0);
  ASSERT_NEAR(km_llm_parse_retry_after("Wed, 21 Oct 2015 07:28:00", 0), -1, 0);
  /* The server's delay wins over the backoff, up to the cap. */
  ASSERT_NEAR(km_llm_retry_delay(1, 1, 60, 1.0, 0.99), 1.0, 0);
  ASSERT_NEAR(km_llm_retry_delay(5, 1, 60, 0, 0.99), 0, 0);
  ASSERT_NEAR(km_llm_retry_delay(1, 1, 60, 3600, 0.5), 60, 0);
  ASSERT_NEAR(km_llm_retry_delay(2, 1, 60, -1, 0.5), 1.0, 1e-12);
}

/* ---- cost and budget ---- */

TEST(cost) {
  ASSERT_NEAR(km_llm_cost(1000000, 500000, 3.0, 15.0), 3.0 + 7.5, 1e-12);
  ASSERT_NEAR(km_llm_cost(1234, 0, 2.5, 10), 1234 * 2.5 / 1e6, 1e-15);
  ASSERT_NEAR(km_llm_cost(0, 0, 2.5, 10), 0, 0);
}

TEST(budget) {
  km_llm_budget none = {-1, -1, -1};
  km_llm_spent s = {1000, 1000000, 1e6};
  ASSERT(km_llm_budget_check(&none, &s, 100) == NULL);
  km_llm_budget req = {2, -1, -1};
  km_llm_spent s1 = {1, 0, 0};
  ASSERT(km_llm_budget_check(&req, &s1, 1) == NULL);
  ASSERT_EQ_STR(km_llm_budget_check(&req, &s1, 2), "requests"); /* n=2 would make it 3 */
  km_llm_spent s2 = {2, 0, 0};
  ASSERT_EQ_STR(km_llm_budget_check(&req, &s2, 1), "requests");
  km_llm_budget tok = {-1, 100, -1};
  km_llm_spent t1 = {5, 99, 0}, t2 = {5, 100, 0};
  ASSERT(km_llm_budget_check(&tok, &t1, 1) == NULL);
  ASSERT_EQ_STR(km_llm_budget_check(&tok, &t2, 1), "tokens");
  km_llm_budget usd = {-1, -1, 0.5};
  km_llm_spent d1 = {1, 1, 0.49}, d2 = {1, 1, 0.5};
  ASSERT(km_llm_budget_check(&usd, &d1, 1) == NULL);
  ASSERT_EQ_STR(km_llm_budget_check(&usd, &d2, 1), "dollars");
  km_llm_budget zero = {0, -1, -1};
  km_llm_spent z = {0, 0, 0};
  ASSERT_EQ_STR(km_llm_budget_check(&zero, &z, 1), "requests");
}

TEST(json_strict) {
  char err[128];
  const char *good[] = {"{}", " {\"a\": [1, -0.5e+3, true, false, null, \"x\\n\\u00e9\"]} ", "{\"k\":{\"n\":0}}"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    if (km_llm_json_strict(good[i], strlen(good[i]), 1, err, sizeof err)) T_FAIL("%s: %s", good[i], err);
  struct { const char *text, *why; } bad[] = {
      {"{\"src\": \"line1\nline2\"}", "raw newline"},
      {"{\"a\": 01}", "bad number"},
      {"{\"a\": 1.}", "bad number"},
      {"{\"a\": +1}", "unexpected character"},
      {"{\"a\": 1} x", "text after"},
      {"{\"a\": \"\\q\"}", "invalid escape"},
      {"{\"a\": \"open}", "unterminated"},
      {"{a: 1}", "not a string"},
      {"{\"a\": 1,}", "not a string"},
      {"[1, 2]", "not a JSON object"},
      {"", "not a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = 0;
    if (!km_llm_json_strict(bad[i].text, strlen(bad[i].text), 1, err, sizeof err)) T_FAIL("accepted %s", bad[i].text);
    if (!strstr(err, bad[i].why)) T_FAIL("%s: '%s' does not say '%s'", bad[i].text, err, bad[i].why);
  }
  ASSERT_EQ_INT(km_llm_json_strict("[1]", 3, 0, err, sizeof err), 0);
}

TEST(server_error_code) {
  char code[64];
  const char *oa = "{\"error\":{\"message\":\"too long\",\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}}";
  km_llm_error_code(oa, strlen(oa), code, sizeof code);
  ASSERT_EQ_STR(code, "context_length_exceeded");
  const char *an = "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"x\"}}";
  km_llm_error_code(an, strlen(an), code, sizeof code);
  ASSERT_EQ_STR(code, "overloaded_error");
  const char *odd[] = {"{\"error\":{\"code\":500}}", "{\"error\":\"plain\"}", "<html>", "{\"error\":{\"code\":\"a b\"}}"};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
    km_llm_error_code(odd[i], strlen(odd[i]), code, sizeof code);
    ASSERT_EQ_STR(code, "");
  }
}

/* ---- the providers' table ---- */

TEST(provider_rows) {
  ASSERT_EQ_STR(km_llm_providers[KM_LLM_OPENAI].name, "openai");
  ASSERT_EQ_STR(km_llm_providers[KM_LLM_ANTHROPIC].name, "anthropic");
  int fallbacks = 0;
  for (size_t i = 0; i < km_llm_n_providers; i++) {
    const km_llm_provider *p = &km_llm_providers[i];
    ASSERT(p->name && *p->name);
    ASSERT_EQ_INT(km_llm_provider_find(p->name), (int)i);
    /* each row is one of three kinds: talks HTTP, replays, or fails every request */
    if (p->body) ASSERT(p->parse && p->path && p->prefix && p->base_url);
    else ASSERT((p->flags & KM_LLM_REPLAYS) || (p->fail_code && p->fail_format));
    if (p->flags & KM_LLM_FALLBACK) fallbacks++;
  }
  ASSERT_EQ_INT(fallbacks, 1);
  ASSERT_EQ_INT(km_llm_provider_find("gemini"), -1);
  ASSERT_EQ_INT(km_llm_provider_find(NULL), -1);
  char list[256];
  km_llm_provider_list(0, list, sizeof list);
  ASSERT_EQ_STR(list, "openai, anthropic, replay or offline");
  km_llm_provider_list(1, list, sizeof list);
  ASSERT_EQ_STR(list, "OPENAI_BASE_URL or ANTHROPIC_API_KEY");
  char tiny[8];
  km_llm_provider_list(0, tiny, sizeof tiny);
  ASSERT_EQ_STR(tiny, "openai,");
  /* a provider that sends nothing builds and reads nothing */
  km_llm_message m[] = {{"user", "x", NULL, 0, NULL}};
  km_llm_params q = {0};
  char *text = NULL, err[128];
  ASSERT_EQ_INT(km_llm_build_request((km_llm_api)km_llm_provider_find("replay"), m, 1, &q, &text, err, sizeof err),
                KM_EINVAL);
  ASSERT_EQ_STR(err, "provider replay sends no requests");
  km_llm_response r;
  ASSERT_EQ_INT(km_llm_parse_response((km_llm_api)km_llm_provider_find("offline"), "{}", 2, &r, err, sizeof err),
                KM_EINVAL);
}

TEST(provider_urls) {
  char out[256];
  static const struct {
    km_llm_api api;
    const char *base, *want, *models;
  } cases[] = {
      {KM_LLM_OPENAI, "http://h:8000/v1", "http://h:8000/v1/chat/completions", "http://h:8000/v1/models"},
      {KM_LLM_OPENAI, "http://h/v1/", "http://h/v1/chat/completions", "http://h/v1/models"},
      {KM_LLM_OPENAI, "http://h/v1/chat/completions", "http://h/v1/chat/completions",
       "http://h/v1/chat/completions/models"},
      {KM_LLM_ANTHROPIC, "https://api.anthropic.com", "https://api.anthropic.com/v1/messages",
       "https://api.anthropic.com/v1/models"},
      {KM_LLM_ANTHROPIC, "http://p/v1//", "http://p/v1/messages", "http://p/v1/models"},
      {KM_LLM_ANTHROPIC, "http://p/v1/messages", "http://p/v1/messages", "http://p/v1/messages/v1/models"},
      {KM_LLM_ANTHROPIC, "http://p/messages", "http://p/messages/v1/messages", "http://p/messages/v1/models"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const km_llm_provider *p = &km_llm_providers[cases[i].api];
    size_t n = km_llm_url(cases[i].api, cases[i].base, p->path, 1, out, sizeof out);
    ASSERT_EQ_STR(out, cases[i].want);
    ASSERT_EQ_INT(n, strlen(cases[i].want));
    km_llm_url(cases[i].api, cases[i].base, p->models_path, 0, out, sizeof out);
    ASSERT_EQ_STR(out, cases[i].models);
  }
  /* the length without writing, as snprintf */
  ASSERT_EQ_INT(km_llm_url(KM_LLM_OPENAI, "http://h/v1", "/chat/completions", 1, NULL, 0),
                strlen("http://h/v1/chat/completions"));
}

int main(void) {
  RUN(provider_rows);
  RUN(provider_urls);
  RUN(openai_request_fields);
  RUN(json_strict);
  RUN(server_error_code);
  RUN(openai_request_leaves_out_what_is_unset);
  RUN(openai_request_tools_and_tool_messages);
  RUN(anthropic_request_translation);
  RUN(anthropic_request_merges_turns_and_defaults);
  RUN(request_extra_fields);
  RUN(request_errors);
  RUN(request_is_valid_utf8);
  RUN(parse_openai_reply);
  RUN(parse_openai_lenient_shapes);
  RUN(parse_errors);
  RUN(parse_anthropic_reply);
  RUN(error_text);
  RUN(http_error_lines);
  RUN(scrub);
  RUN(retryable);
  RUN(backoff_bounds);
  RUN(retry_after);
  RUN(cost);
  RUN(budget);
  return DONE();
}
