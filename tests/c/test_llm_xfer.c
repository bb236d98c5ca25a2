/* test_llm_xfer.c — the model client's transfer engine (runtime/core/km_llm_xfer_core.c)
 * against tests/fake_llm_server.py on loopback, started here: replies, retries with backoff
 * and Retry-After, giving up, timeouts, a refused connection, requests that run at once, the
 * stop flag and interrupts, a job freed in flight, one GET. The server's [[directives]] in
 * the user message choose each answer.
 *
 * Run from the source tree (prove does); KM_FAKE_LLM_SERVER names the script elsewhere. It
 * skips, saying why, where python3 or the script is missing. */
#define _GNU_SOURCE
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "km_llm_xfer_core.h"

extern char **environ;

static char dir[256], port_file[300], url[128], models_url[128];
static pid_t server;

/* Starts the server; 0, or -1 with why in `why`. */
static int start_server(char *why, size_t n) {
  const char *script = getenv("KM_FAKE_LLM_SERVER");
  if (!script) script = "tests/fake_llm_server.py";
  if (access(script, R_OK)) return snprintf(why, n, "no %s (run from the source tree)", script), -1;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/kmxfer.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return snprintf(why, n, "mkdtemp failed"), -1;
  snprintf(port_file, sizeof port_file, "%s/port", dir);
  char *argv[] = {"python3", (char *)script, port_file, "--idle", "60", NULL};
  if (posix_spawnp(&server, "python3", NULL, NULL, argv, environ)) return snprintf(why, n, "no python3"), -1;
  for (int i = 0; i < 1000; i++) { /* up to 10 s */
    FILE *f = fopen(port_file, "r");
    int port = 0;
    if (f && fscanf(f, "%d", &port) == 1 && port > 0) {
      fclose(f);
      snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", port);
      snprintf(models_url, sizeof models_url, "http://127.0.0.1:%d/v1/models", port);
      return 0;
    }
    if (f) fclose(f);
    usleep(10000);
  }
  return snprintf(why, n, "the fake server did not start within 10 s"), -1;
}

static void stop_server(void) {
  if (server > 0) kill(server, SIGTERM), waitpid(server, NULL, 0);
  remove(port_file);
  rmdir(dir);
}

static int done_count;
static void count_done(km_llm_job *j) { (void)j; done_count++; }

/* An engine for the fake server, quick to retry. */
static void open_engine(km_llm_xfer *x, const char *to) {
  km_llm_xfer_open(x, KM_LLM_OPENAI, to);
  km_llm_xfer_header(x, "Content-Type", "", "application/json");
  km_llm_xfer_header(x, "Expect", "", "");
  x->backoff_base = 0.01;
  x->timeout = 20;
  x->on_done = count_done;
}

/* A job asking the fake model `text` (its directives), added to x. */
static km_llm_job *ask(km_llm_xfer *x, const char *text) {
  km_llm_message m = {"user", text, NULL, 0, NULL};
  km_llm_params p = {0};
  p.model = "fake-model";
  char *body = NULL, err[256];
  if (km_llm_build_request(KM_LLM_OPENAI, &m, 1, &p, &body, err, sizeof err)) return NULL;
  km_llm_job *j = calloc(1, sizeof *j);
  if (!j || km_llm_job_init(x, j, body)) return NULL;
  km_llm_xfer_add(x, j);
  return j;
}

static int all_done(void *ud) {
  km_llm_xfer *x = ud;
  for (km_llm_job *j = x->head; j; j = j->next)
    if (j->state != KM_LLM_JOB_DONE) return 0;
  return 1;
}

/* Drives x until every job is done (at most 30 s); the seconds it took. */
static double run_all(km_llm_xfer *x) {
  double t0 = km_llm_mono();
  km_llm_xfer_drive(x, t0 + 30, all_done, x);
  return km_llm_mono() - t0;
}

static void drop(km_llm_xfer *x, km_llm_job *j) {
  km_llm_job_free(x, j);
  free(j);
}

/* A job asking `text` (ask's), run to its end; NULL where it could not be made. *secs (where
 * secs is not NULL): the seconds it took. */
static km_llm_job *ask_and_run(km_llm_xfer *x, const char *text, double *secs) {
  km_llm_job *j = ask(x, text);
  if (!j) return NULL;
  double s = run_all(x);
  if (secs) *secs = s;
  return j;
}

/* A one-job test's end: its job freed, its engine closed. */
static void finish(km_llm_xfer *x, km_llm_job *j) {
  drop(x, j);
  km_llm_xfer_close(x);
}

TEST(a_reply) {
  km_llm_xfer x;
  open_engine(&x, url);
  done_count = 0;
  km_llm_job *j = ask_and_run(&x, "[[reply:hello from the fake]]", NULL);
  ASSERT(j);
  ASSERT_EQ_INT(j->state, KM_LLM_JOB_DONE);
  ASSERT_EQ_INT(j->ok, 1);
  ASSERT_EQ_INT(j->status, 200);
  ASSERT_EQ_INT(j->attempts, 1);
  ASSERT_EQ_INT(done_count, 1);
  ASSERT_EQ_INT(x.attempts, 1);
  ASSERT(j->r.n_choices == 1);
  ASSERT_EQ_STR(j->r.choices[0].content, "hello from the fake");
  ASSERT(j->finished >= j->started && j->wall_started > 1e9);
  drop(&x, j);
  ASSERT(x.head == NULL && x.tail == NULL);
  km_llm_xfer_close(&x);
}

TEST(retries_a_server_error_then_succeeds) {
  km_llm_xfer x;
  open_engine(&x, url);
  km_llm_job *j = ask_and_run(&x, "[[fault:500x2:t=xfer-retry]] [[reply:third time]]", NULL);
  ASSERT(j);
  ASSERT_EQ_INT(j->ok, 1);
  ASSERT_EQ_INT(j->attempts, 3);
  ASSERT_EQ_STR(j->r.choices[0].content, "third time");
  finish(&x, j);
}

TEST(gives_up_after_max_retries) {
  km_llm_xfer x;
  open_engine(&x, url);
  x.max_retries = 1;
  km_llm_job *j = ask_and_run(&x, "[[fault:503x5:t=xfer-give-up]]", NULL);
  ASSERT(j);
  ASSERT_EQ_INT(j->ok, 0);
  ASSERT_EQ_STR(j->code, "HTTP_503");
  ASSERT_EQ_INT(j->attempts, 2);
  ASSERT(strstr(j->msg, "gave up after 2 attempts"));
  finish(&x, j);
}

TEST(waits_as_retry_after_says) {
  km_llm_xfer x;
  open_engine(&x, url);
  double secs;
  km_llm_job *j = ask_and_run(&x, "[[fault:429:retry-after=1:t=xfer-ra]] [[reply:after waiting]]", &secs);
  ASSERT(j);
  ASSERT_EQ_INT(j->ok, 1);
  ASSERT_EQ_INT(j->attempts, 2);
  ASSERT(secs >= 0.9); /* the backoff alone would be at most 10 ms */
  finish(&x, j);
}

TEST(requests_run_at_once) {
  km_llm_xfer x;
  open_engine(&x, url);
  km_llm_job *js[3];
  for (int i = 0; i < 3; i++) ASSERT((js[i] = ask(&x, "[[delay:1]] [[reply:slow]]")));
  double secs = run_all(&x);
  for (int i = 0; i < 3; i++) ASSERT_EQ_INT(js[i]->ok, 1);
  if (secs >= 2.5) T_FAIL("three 1 s requests took %.2f s: not concurrent", secs);
  for (int i = 0; i < 3; i++) drop(&x, js[i]);
  km_llm_xfer_close(&x);
}

TEST(a_silent_server_times_out) {
  km_llm_xfer x;
  open_engine(&x, url);
  x.timeout = 0.5;
  x.max_retries = 0;
  km_llm_job *j = ask_and_run(&x, "[[fault:hang:s=5]]", NULL);
  ASSERT(j);
  ASSERT_EQ_STR(j->code, "TIMEOUT");
  ASSERT(strstr(j->msg, "timed out after 0.5 s"));
  finish(&x, j);
}

TEST(a_refused_connection) {
  km_llm_xfer x;
  open_engine(&x, "http://127.0.0.1:1/v1/chat/completions");
  x.max_retries = 0;
  km_llm_job *j = ask_and_run(&x, "hello", NULL);
  ASSERT(j);
  ASSERT_EQ_STR(j->code, "CONNECT");
  ASSERT(strstr(j->msg, "cannot connect to http://127.0.0.1:1/"));
  finish(&x, j);
}

TEST(a_reply_that_is_not_json) {
  km_llm_xfer x;
  open_engine(&x, url);
  km_llm_job *j = ask_and_run(&x, "[[fault:invalid]]", NULL);
  ASSERT(j);
  ASSERT_EQ_STR(j->code, "BAD_RESPONSE");
  finish(&x, j);
}

TEST(the_stop_flag_and_interrupt) {
  km_llm_xfer x;
  open_engine(&x, url);
  volatile sig_atomic_t stop = 0;
  x.stop = &stop;
  done_count = 0;
  km_llm_job *j = ask(&x, "[[fault:hang:s=5]]");
  ASSERT(j);
  km_llm_xfer_step(&x);
  ASSERT_EQ_INT(j->state, KM_LLM_JOB_RUN);
  stop = 1;
  double t0 = km_llm_mono();
  km_llm_xfer_drive(&x, t0 + 10, all_done, &x);
  ASSERT(km_llm_mono() - t0 < 1.5);
  ASSERT_EQ_INT(j->state, KM_LLM_JOB_RUN);
  km_llm_xfer_interrupt(&x, j, "SIGINT");
  ASSERT_EQ_INT(j->state, KM_LLM_JOB_DONE);
  ASSERT_EQ_STR(j->code, "INTERRUPTED");
  ASSERT(strstr(j->msg, "interrupted (SIGINT) before http://127.0.0.1:"));
  ASSERT_EQ_INT(done_count, 1);
  km_llm_xfer_interrupt(&x, j, "SIGINT"); /* a done job stays as it was */
  ASSERT_EQ_INT(done_count, 1);
  finish(&x, j);
}

TEST(a_job_freed_in_flight) {
  km_llm_xfer x;
  open_engine(&x, url);
  km_llm_job *a = ask(&x, "[[fault:hang:s=5]]"), *b = ask(&x, "[[reply:b]]");
  ASSERT(a && b);
  km_llm_xfer_step(&x);
  drop(&x, a); /* leaves the multi handle; the other goes on */
  ASSERT(x.head == b && x.tail == b);
  run_all(&x);
  ASSERT_EQ_INT(b->ok, 1);
  drop(&x, b);
  km_llm_xfer_close(&x);
  km_llm_xfer_close(&x); /* idempotent */
}

TEST(one_get) {
  km_llm_xfer x;
  open_engine(&x, url);
  km_llm_job j = {0};
  ASSERT_EQ_INT(km_llm_xfer_get(&x, models_url, 10, &j), KM_OK);
  ASSERT_EQ_INT(j.status, 200);
  ASSERT(j.resp && strstr(j.resp, "\"fake-model\""));
  km_llm_job_free(NULL, &j);
  km_llm_job k = {0};
  ASSERT_EQ_INT(km_llm_xfer_get(&x, "http://127.0.0.1:1/v1/models", 10, &k), KM_EIO);
  ASSERT_EQ_STR(k.code, "CONNECT");
  km_llm_job_free(NULL, &k);
  km_llm_xfer_close(&x);
}

TEST(an_engine_without_url_sends_nothing) {
  km_llm_xfer x;
  ASSERT_EQ_INT(km_llm_xfer_open(&x, KM_LLM_OPENAI, NULL), KM_OK);
  ASSERT(x.multi == NULL);
  km_llm_xfer_step(&x); /* nothing to do */
  km_llm_xfer_close(&x);
}

int main(void) {
  char why[256];
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (start_server(why, sizeof why)) {
    stop_server();
    printf("1..0 # SKIP %s\n", why);
    return 0;
  }
  RUN(a_reply);
  RUN(retries_a_server_error_then_succeeds);
  RUN(gives_up_after_max_retries);
  RUN(waits_as_retry_after_says);
  RUN(requests_run_at_once);
  RUN(a_silent_server_times_out);
  RUN(a_refused_connection);
  RUN(a_reply_that_is_not_json);
  RUN(the_stop_flag_and_interrupt);
  RUN(a_job_freed_in_flight);
  RUN(one_get);
  RUN(an_engine_without_url_sends_nothing);
  stop_server();
  curl_global_cleanup();
  return DONE();
}
