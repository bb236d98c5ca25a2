/* km_llm_xfer_core.c — the model client's transfer engine (km_llm_xfer_core.h): HTTP attempts
 * over a libcurl multi handle, retries by km_llm_core.c's policy. Plain C: no lua_State. */
#define _GNU_SOURCE /* explicit_bzero, strcasecmp */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "km_llm_xfer_core.h"

double km_llm_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double km_llm_wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Uniform in [0, 1) for backoff jitter: xorshift64*. */
static double rand01(km_llm_xfer *x) {
  uint64_t v = x->rng;
  v ^= v >> 12;
  v ^= v << 25;
  v ^= v >> 27;
  x->rng = v;
  return (double)((v * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

/* ---- the engine's lifetime ---- */

int km_llm_xfer_open(km_llm_xfer *x, km_llm_api api, const char *url) {
  memset(x, 0, sizeof *x);
  x->api = api;
  x->timeout = 600;
  x->connect_timeout = 10;
  x->backoff_base = 1;
  x->max_retries = 4;
  x->rng = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)x;
  if (!x->rng) x->rng = 88172645463325252ULL;
  if (!url) return KM_OK;
  x->url = strdup(url);
  x->multi = x->url ? curl_multi_init() : NULL;
  if (!x->multi) {
    km_llm_xfer_close(x);
    return KM_ENOMEM;
  }
  return KM_OK;
}

int km_llm_xfer_header(km_llm_xfer *x, const char *name, const char *prefix, const char *value) {
  size_t n = strlen(name) + strlen(prefix) + strlen(value) + 3;
  char *line = malloc(n);
  if (!line) return KM_ENOMEM;
  if (*value) snprintf(line, n, "%s: %s%s", name, prefix, value);
  else snprintf(line, n, "%s:", name); /* "Expect:" with no value removes the header */
  struct curl_slist *h = curl_slist_append(x->headers, line);
  explicit_bzero(line, n);
  free(line);
  if (!h) return KM_ENOMEM;
  x->headers = h;
  return KM_OK;
}

void km_llm_xfer_close(km_llm_xfer *x) {
  if (x->multi) curl_multi_cleanup(x->multi);
  x->multi = NULL;
  /* The header list holds the key: wipe its copies before they go back to malloc. */
  for (struct curl_slist *h = x->headers; h; h = h->next) explicit_bzero(h->data, strlen(h->data));
  curl_slist_free_all(x->headers);
  x->headers = NULL;
  free(x->url);
  x->url = NULL;
}

/* ---- jobs ---- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  km_llm_job *j = ud;
  size_t n = size * nmemb;
  if (j->resp_n + n > KM_LLM_MAX_BODY) {
    j->too_large = 1;
    return 0; /* curl ends the transfer with CURLE_WRITE_ERROR */
  }
  if (j->resp_n + n + 1 > j->resp_cap) {
    size_t cap = j->resp_cap ? j->resp_cap : 4096;
    while (cap < j->resp_n + n + 1) cap *= 2;
    char *p = realloc(j->resp, cap);
    if (!p) return 0;
    j->resp = p;
    j->resp_cap = cap;
  }
  memcpy(j->resp + j->resp_n, data, n);
  j->resp_n += n;
  j->resp[j->resp_n] = '\0';
  return n;
}

/* Only Retry-After is kept; a status line starts a new response (after a 100 Continue). */
static size_t on_header(char *data, size_t size, size_t nmemb, void *ud) {
  km_llm_job *j = ud;
  size_t n = size * nmemb;
  if (n >= 5 && !memcmp(data, "HTTP/", 5)) j->retry_after[0] = '\0';
  if (n > 12 && !strncasecmp(data, "Retry-After:", 12)) {
    size_t k = n - 12 < sizeof j->retry_after - 1 ? n - 12 : sizeof j->retry_after - 1;
    memcpy(j->retry_after, data + 12, k);
    j->retry_after[k] = '\0';
  }
  return n;
}

/* What every handle of the engine shares: the headers, where replies go, the limits. */
static int common_opts(km_llm_xfer *x, km_llm_job *j, const char *url, double limit) {
  CURL *e = j->easy;
  int bad = 0;
#define SET(opt, val) bad |= curl_easy_setopt(e, opt, val) != CURLE_OK
  SET(CURLOPT_URL, url);
  SET(CURLOPT_HTTPHEADER, x->headers);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, j);
  SET(CURLOPT_ERRORBUFFER, j->errbuf);
  SET(CURLOPT_TIMEOUT_MS, (long)ceil(limit * 1000));
  SET(CURLOPT_CONNECTTIMEOUT_MS, (long)ceil(x->connect_timeout * 1000));
  SET(CURLOPT_USERAGENT, "kmrun/" KM_VERSION);
#if LIBCURL_VERSION_NUM >= 0x075500
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
#endif
#undef SET
  return bad;
}

int km_llm_job_init(km_llm_xfer *x, km_llm_job *j, char *body) {
  j->body = body;
  CURL *e = j->easy = curl_easy_init();
  if (!e || !x->url) return KM_ENOMEM;
  int bad = common_opts(x, j, x->url, x->timeout);
#define SET(opt, val) bad |= curl_easy_setopt(e, opt, val) != CURLE_OK
  SET(CURLOPT_POST, 1L);
  SET(CURLOPT_POSTFIELDS, j->body);
  SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(j->body));
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, j);
  SET(CURLOPT_PRIVATE, j);
  SET(CURLOPT_ACCEPT_ENCODING, "");
  /* Long generations sit silent for minutes; keepalives stop NATs dropping the socket. */
  SET(CURLOPT_TCP_KEEPALIVE, 1L);
#undef SET
  j->state = KM_LLM_JOB_WAIT;
  return bad ? KM_ENOMEM : KM_OK;
}

void km_llm_xfer_add(km_llm_xfer *x, km_llm_job *j) {
  if (j->linked) return;
  j->prev = x->tail;
  j->next = NULL;
  if (x->tail) x->tail->next = j;
  else x->head = j;
  x->tail = j;
  j->linked = 1;
}

void km_llm_job_free(km_llm_xfer *x, km_llm_job *j) {
  if (j->linked && x) {
    if (j->prev) j->prev->next = j->next;
    else x->head = j->next;
    if (j->next) j->next->prev = j->prev;
    else x->tail = j->prev;
  }
  if (j->easy) {
    /* Only an attempt in flight is in the multi handle. */
    if (j->state == KM_LLM_JOB_RUN && x && x->multi) curl_multi_remove_handle(x->multi, j->easy);
    curl_easy_cleanup(j->easy);
  }
  km_llm_free(j->body);
  free(j->resp);
  km_llm_response_free(&j->r);
  void *owner = j->owner;
  memset(j, 0, sizeof *j);
  j->owner = owner;
}

/* ---- attempts ---- */

static km_llm_net net_of(CURLcode rc, km_llm_job *j) {
  switch (rc) {
  case CURLE_OK: return KM_LLM_NET_OK;
  case CURLE_OPERATION_TIMEDOUT: {
    curl_off_t connected = 0;
    curl_easy_getinfo(j->easy, CURLINFO_CONNECT_TIME_T, &connected);
    return connected ? KM_LLM_NET_TIMEOUT : KM_LLM_NET_CONNECT_TIMEOUT;
  }
  case CURLE_COULDNT_CONNECT:
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY: return KM_LLM_NET_REFUSED;
  case CURLE_WRITE_ERROR: return j->too_large ? KM_LLM_NET_TOO_LARGE : KM_LLM_NET_OTHER;
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_SSL_CONNECT_ERROR: return KM_LLM_NET_RESET;
  default: return KM_LLM_NET_OTHER;
  }
}

static void finish(km_llm_xfer *x, km_llm_job *j) {
  j->state = KM_LLM_JOB_DONE;
  if (x->on_done) x->on_done(j);
}

static void fail_job(km_llm_xfer *x, km_llm_job *j, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_job(km_llm_xfer *x, km_llm_job *j, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(j->msg, sizeof j->msg, fmt, ap);
  va_end(ap);
  if (j->attempts > 1 && n >= 0 && (size_t)n < sizeof j->msg)
    snprintf(j->msg + n, sizeof j->msg - (size_t)n, " (gave up after %d attempts)", j->attempts);
  snprintf(j->code, sizeof j->code, "%s", code);
  j->ok = 0;
  finish(x, j);
}

static const char *curl_text(km_llm_job *j, CURLcode rc) {
  return j->errbuf[0] ? j->errbuf : curl_easy_strerror(rc);
}

/* A failure below HTTP, in words. */
static void fail_net(km_llm_xfer *x, km_llm_job *j, km_llm_net net, CURLcode rc) {
  const char *url = x->url;
  switch (net) {
  case KM_LLM_NET_TIMEOUT:
    fail_job(x, j, "TIMEOUT", "request to %s timed out after %g s", url, x->timeout);
    break;
  case KM_LLM_NET_CONNECT_TIMEOUT:
    fail_job(x, j, "CONNECT", "cannot connect to %s: no connection within %g s", url, x->connect_timeout);
    break;
  case KM_LLM_NET_REFUSED:
    fail_job(x, j, "CONNECT", "cannot connect to %s: %s", url, curl_text(j, rc));
    break;
  case KM_LLM_NET_RESET:
    fail_job(x, j, "CONNECT", "connection to %s broke: %s", url, curl_text(j, rc));
    break;
  case KM_LLM_NET_TOO_LARGE:
    fail_job(x, j, "BAD_RESPONSE", "bad response from %s: larger than %u MiB", url, KM_LLM_MAX_BODY >> 20);
    break;
  default:
    fail_job(x, j, "CONNECT", "request to %s failed: %s", url, curl_text(j, rc));
    break;
  }
}

/* Decides what an attempt that just ended means: done, failed, or retry later. */
static void attempt_done(km_llm_xfer *x, km_llm_job *j, CURLcode rc, double now) {
  long status = 0;
  curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &status);
  j->status = status;
  km_llm_net net = net_of(rc, j);
  j->finished = now;
  j->wall_finished = km_llm_wall();
  if (net == KM_LLM_NET_OK && status >= 200 && status <= 299) {
    char why[256];
    if (km_llm_parse_response(x->api, j->resp ? j->resp : "", j->resp_n, &j->r, why, sizeof why) == KM_OK) {
      j->ok = 1;
      finish(x, j);
    } else {
      fail_job(x, j, "BAD_RESPONSE", "bad response from %s: %s", x->url, why);
    }
    return;
  }
  if (km_llm_retryable(net, status) && j->attempts <= x->max_retries) {
    double ra = -1;
    if (net == KM_LLM_NET_OK && j->retry_after[0]) ra = km_llm_parse_retry_after(j->retry_after, (double)time(NULL));
    j->next_at = now + km_llm_retry_delay(j->attempts, x->backoff_base, KM_LLM_BACKOFF_CAP, ra, rand01(x));
    j->state = KM_LLM_JOB_WAIT;
    return;
  }
  if (net != KM_LLM_NET_OK) {
    fail_net(x, j, net, rc);
    return;
  }
  char line[sizeof j->msg], code[32];
  km_llm_http_error(x->api, status, j->resp, j->resp_n, x->has_key, line, sizeof line);
  snprintf(code, sizeof code, "HTTP_%ld", status);
  km_llm_error_code(j->resp, j->resp_n, j->server_code, sizeof j->server_code);
  fail_job(x, j, code, "%s", line);
}

static void start_attempt(km_llm_xfer *x, km_llm_job *j, double now) {
  j->resp_n = 0;
  j->too_large = 0;
  j->server_code[0] = '\0';
  j->retry_after[0] = '\0';
  j->errbuf[0] = '\0';
  j->attempts++;
  if (!j->started) {
    j->started = now;
    j->wall_started = km_llm_wall();
  }
  CURLMcode mc = curl_multi_add_handle(x->multi, j->easy);
  if (mc != CURLM_OK) {
    j->finished = now;
    j->wall_finished = km_llm_wall();
    fail_job(x, j, "CONNECT", "request to %s failed: %s", x->url, curl_multi_strerror(mc));
    return;
  }
  j->state = KM_LLM_JOB_RUN;
}

/* ---- the loop ---- */

void km_llm_xfer_step(km_llm_xfer *x) {
  if (!x->multi) return;
  double now = km_llm_mono();
  for (km_llm_job *j = x->head; j; j = j->next)
    if (j->state == KM_LLM_JOB_WAIT && j->next_at <= now) start_attempt(x, j, now);
  int running = 0;
  curl_multi_perform(x->multi, &running);
  CURLMsg *m;
  int queued;
  while ((m = curl_multi_info_read(x->multi, &queued))) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL *e = m->easy_handle;
    CURLcode rc = m->data.result; /* m dies with the removal below */
    km_llm_job *j = NULL;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&j);
    curl_multi_remove_handle(x->multi, e);
    x->attempts++;
    attempt_done(x, j, rc, km_llm_mono());
  }
}

void km_llm_xfer_drive(km_llm_xfer *x, double deadline, int (*enough)(void *ud), void *ud) {
  for (;;) {
    km_llm_xfer_step(x);
    if (enough(ud)) return;
    if (!x->multi) return; /* nothing here goes over the network */
    if (x->stop && *x->stop) return;
    double now = km_llm_mono(), wake = deadline;
    if (now >= deadline) return;
    for (const km_llm_job *j = x->head; j; j = j->next)
      if (j->state == KM_LLM_JOB_WAIT && j->next_at < wake) wake = j->next_at;
    double wait = wake - now;
    int ms = wait <= 0 ? 0 : wait >= 1.0 ? 1000 : (int)ceil(wait * 1000);
    curl_multi_poll(x->multi, NULL, 0, ms, NULL);
  }
}

void km_llm_xfer_interrupt(km_llm_xfer *x, km_llm_job *j, const char *why) {
  if (j->state == KM_LLM_JOB_DONE) return;
  if (j->state == KM_LLM_JOB_RUN && x->multi) curl_multi_remove_handle(x->multi, j->easy);
  j->state = KM_LLM_JOB_WAIT; /* out of the multi handle: free must not remove it again */
  if (!j->finished) {
    j->finished = km_llm_mono();
    j->wall_finished = km_llm_wall();
  }
  fail_job(x, j, "INTERRUPTED", "interrupted (%s) before %s answered", why, x->url);
}

/* ---- one GET ---- */

int km_llm_xfer_get(km_llm_xfer *x, const char *url, double limit, km_llm_job *j) {
  if (!(j->easy = curl_easy_init())) return KM_ENOMEM;
  if (common_opts(x, j, url, limit) || curl_easy_setopt(j->easy, CURLOPT_HTTPGET, 1L) != CURLE_OK)
    return KM_ENOMEM;
  CURLcode rc = curl_easy_perform(j->easy);
  curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &j->status);
  if (rc == CURLE_OK) return KM_OK;
  snprintf(j->code, sizeof j->code, "%s", rc == CURLE_OPERATION_TIMEDOUT ? "TIMEOUT" : "CONNECT");
  snprintf(j->msg, sizeof j->msg, "cannot get %s: %s", url, curl_text(j, rc));
  return KM_EIO;
}
