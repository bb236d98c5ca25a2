/* km_llm_xfer_core.h — the model client's transfer engine: chat requests' HTTP attempts over
 * one libcurl multi handle, with retries and backoff (km_llm_core.h's policy), in plain C.
 *
 *   km_llm_xfer x;  km_llm_xfer_open(&x, api, url);  km_llm_xfer_header(&x, "Content-Type", "", "application/json");
 *   km_llm_job *j = calloc(1, sizeof *j);  km_llm_job_init(&x, j, body);  km_llm_xfer_add(&x, j);
 *   km_llm_xfer_drive(&x, deadline, done_yet, ud);      -- j->state == KM_LLM_JOB_DONE: j->ok, j->r or j->code, j->msg
 *   km_llm_job_free(&x, j);  km_llm_xfer_close(&x);
 *
 * Every job added to an engine shares its multi handle, so all of them move whenever a
 * caller drives it (N requests cost the time of the slowest, not the sum). curl's callbacks
 * only write into job buffers, and curl runs only inside km_llm_xfer_step/drive, so a caller
 * (the Lua binding, runtime/bind/km_llm.c) can run its own code between turns with transfers
 * open. A job waiting for its retry time is not in the multi handle until then.
 * tests/c/test_llm_xfer.c drives it against tests/fake_llm_server.py on loopback.
 *
 * Ownership: an engine owns its multi handle, its URL and header list (copies: the header
 * list may hold the API key, so it is wiped before it is freed); km_llm_xfer_close frees
 * them (jobs must be freed first). A job owns its easy handle, its request body (given to
 * km_llm_job_init; km_llm_free), its response bytes and its parsed reply, until
 * km_llm_job_free; the job's own memory is the caller's. */
#ifndef KM_LLM_XFER_CORE_H
#define KM_LLM_XFER_CORE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "km_llm_core.h"

#define KM_LLM_BACKOFF_CAP 60.0       /* seconds: the longest wait between two attempts */
#define KM_LLM_MAX_BODY (64u << 20)   /* a reply larger than this is refused, not buffered */

typedef enum { KM_LLM_JOB_WAIT, KM_LLM_JOB_RUN, KM_LLM_JOB_DONE } km_llm_job_state;

/* One HTTP exchange and its retries. */
typedef struct km_llm_job km_llm_job;
struct km_llm_job {
  km_llm_job *prev, *next;    /* in its engine's list while added */
  int linked;
  void *owner;                /* the caller's: what the job belongs to */
  CURL *easy;                 /* set up once, reused by every attempt */
  char *body;                 /* request JSON (km_llm_free) */
  char *resp;                 /* response bytes, NUL-terminated */
  size_t resp_n, resp_cap;
  int too_large;
  char retry_after[64];
  char errbuf[CURL_ERROR_SIZE];
  km_llm_job_state state;
  int attempts;
  long status;                /* the last attempt's HTTP status (0: none) */
  double next_at, started, finished;  /* km_llm_mono() */
  double wall_started, wall_finished; /* km_llm_wall(): Unix seconds */
  int ok;                     /* DONE and r holds the parsed reply */
  char code[32];              /* DONE and not ok: "HTTP_429", "TIMEOUT", "CONNECT", ... */
  char server_code[64];       /* the server's error.code on an HTTP error, or "" */
  char msg[640];              /* DONE and not ok: one line saying why */
  km_llm_response r;
};

/* The engine of one client. Set the settings after km_llm_xfer_open (its defaults: 600 s,
 * 10 s to connect, 4 retries, backoff base 1 s). */
typedef struct {
  CURLM *multi;
  km_llm_api api;               /* how replies and errors are read */
  char *url;                    /* where chat requests go */
  struct curl_slist *headers;   /* sent with every request */
  int has_key;                  /* an API key is sent (error wording) */
  double timeout, connect_timeout, backoff_base;
  int max_retries;
  uint64_t rng;                 /* backoff jitter (xorshift64*); not for secrets */
  long long attempts;           /* HTTP attempts that ended */
  volatile sig_atomic_t *stop;  /* when it points at nonzero, drive returns (NULL: never) */
  void (*on_done)(km_llm_job *j); /* called as a job becomes DONE (NULL: none) */
  km_llm_job *head, *tail;      /* added jobs, in the order they were added */
} km_llm_xfer;

/* Monotonic seconds (durations, deadlines) and Unix seconds (when a request ran). */
double km_llm_mono(void);
double km_llm_wall(void);

/* A zeroed engine with its multi handle and a copy of url (NULL: an engine that sends
 * nothing, as replay and offline clients are). KM_OK, or KM_ENOMEM (then nothing to close). */
int km_llm_xfer_open(km_llm_xfer *x, km_llm_api api, const char *url);
/* Appends the header "name: prefix value" (the copy made on the way is wiped). KM_OK or
 * KM_ENOMEM. */
int km_llm_xfer_header(km_llm_xfer *x, const char *name, const char *prefix, const char *value);
/* Frees the multi handle, the URL and the (wiped) headers. Idempotent. */
void km_llm_xfer_close(km_llm_xfer *x);

/* Sets up a zeroed job to POST body (the job owns it from here, even on failure) to the
 * engine's URL; state WAIT. KM_OK, or KM_ENOMEM when curl cannot make a handle. */
int km_llm_job_init(km_llm_xfer *x, km_llm_job *j, char *body);
/* Adds the job to the engine's list: it starts at the next step. */
void km_llm_xfer_add(km_llm_xfer *x, km_llm_job *j);
/* Takes the job out of its engine (aborting an attempt in flight) and frees what it owns;
 * the job is left zeroed but for owner. x may be NULL for a job never added. Idempotent. */
void km_llm_job_free(km_llm_xfer *x, km_llm_job *j);

/* One turn, never waiting: starts the attempts that are due, lets curl move bytes, and
 * settles the attempts that ended (DONE, or WAIT for a retry). */
void km_llm_xfer_step(km_llm_xfer *x);
/* Turns until enough(ud) answers nonzero, the deadline (km_llm_mono() seconds) passes or
 * *stop is set, sleeping in curl_multi_poll until a socket is ready, a retry is due or the
 * deadline comes, at most 1 s at a time. Returns at once without a multi handle. */
void km_llm_xfer_drive(km_llm_xfer *x, double deadline, int (*enough)(void *ud), void *ud);
/* Ends a job that is not DONE: its attempt leaves the multi handle and it fails with code
 * INTERRUPTED and "interrupted (<why>) before <url> answered". */
void km_llm_xfer_interrupt(km_llm_xfer *x, km_llm_job *j, const char *why);

/* One blocking GET of url with the engine's headers, at most limit seconds, into j's
 * buffers (j zeroed; km_llm_job_free after). KM_OK when a response came (j->status holds
 * its HTTP status), else KM_EIO with j->code "TIMEOUT" or "CONNECT" and j->msg. */
int km_llm_xfer_get(km_llm_xfer *x, const char *url, double limit, km_llm_job *j);

#endif
