/* km_lease_core.c — episode leases in the trajectory store (see km_lease_core.h).
 * Pure C: no lua_State. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <sqlite3.h>

#include "km.h"
#include "km_lease_core.h"
#include "km_store_core.h"

#define LEASE_COLS "run_id, episode_id, host, pid, state, status, taken_at, expires_at, done_at"

static void host_name(char *out, size_t n) {
  if (gethostname(out, n) != 0) out[0] = '\0';
  out[n - 1] = '\0';
}

static void copy_col(sqlite3_stmt *st, int i, char *out, size_t n) {
  const unsigned char *v = sqlite3_column_text(st, i);
  snprintf(out, n, "%s", v ? (const char *)v : "");
}

/* A holder is gone when it ran on this host and its pid no longer exists. On another host
 * only the lease's expiry can tell. */
static int holder_gone(const km_lease *l) {
  char host[256];
  host_name(host, sizeof host);
  if (!l->host[0] || strcmp(l->host, host) != 0) return 0;
  if (l->pid <= 0 || l->pid == (int64_t)getpid()) return 0;
  return kill((pid_t)l->pid, 0) != 0 && errno == ESRCH;
}

static void fill(sqlite3_stmt *st, km_lease *l) {
  memset(l, 0, sizeof *l);
  l->run_id = sqlite3_column_int64(st, 0);
  l->episode_id = sqlite3_column_int64(st, 1);
  copy_col(st, 2, l->host, sizeof l->host);
  l->pid = sqlite3_column_int64(st, 3);
  copy_col(st, 4, l->state, sizeof l->state);
  copy_col(st, 5, l->status, sizeof l->status);
  l->taken_at = sqlite3_column_double(st, 6);
  l->expires_at = sqlite3_column_double(st, 7);
  l->done_at = sqlite3_column_double(st, 8);
  l->alive = !strcmp(l->state, "live") && l->expires_at > km_store_now() && !holder_gone(l);
}

/* Prepares sql and binds ?1 to key (when key is not NULL). */
static sqlite3_stmt *prepare(km_store *s, const char *sql, const char *key, const char *what) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(km_store_sqlite(s), sql, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    km_store_sqlite_error(s, rc, what);
    return NULL;
  }
  if (key) sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
  return st;
}

/* Steps a statement that gives no rows and finalizes it. */
static int run_once(km_store *s, sqlite3_stmt *st, const char *what) {
  int rc = sqlite3_step(st);
  int out = (rc == SQLITE_DONE || rc == SQLITE_ROW) ? KM_OK : km_store_sqlite_error(s, rc, what);
  sqlite3_finalize(st);
  return out;
}

static int read_lease(km_store *s, const char *key, km_lease *out, int *found) {
  sqlite3_stmt *st = prepare(s, "SELECT " LEASE_COLS " FROM leases WHERE key = ?1", key,
                             "reading a lease");
  if (!st) return KM_STORE_ESQLITE;
  int rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  if (rc == SQLITE_ROW) fill(st, out);
  int status = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? KM_OK
                                                       : km_store_sqlite_error(s, rc, "reading a lease");
  sqlite3_finalize(st);
  return status;
}

int km_lease_get(km_store *s, const char *key, km_lease *out, int *found) {
  km_store_begin_call(s);
  if (!key) return km_store_set_error(s, KM_EINVAL, "INVALID", "lease: no key");
  return read_lease(s, key, out, found);
}

static int exec(km_store *s, const char *sql, const char *what) {
  int rc = sqlite3_exec(km_store_sqlite(s), sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? KM_OK : km_store_sqlite_error(s, rc, what);
}

/* Marks a running episode abandoned (its lease, if any, ends through the trigger). */
static int abandon_running(km_store *s, int64_t episode_id, const char *summary_json) {
  sqlite3_stmt *st = prepare(s, "UPDATE episodes SET status = 'abandoned', finished_at = ?2, "
                                "summary = ?3 WHERE id = ?1 AND status = 'running'",
                             NULL, "abandoning an episode");
  if (!st) return KM_STORE_ESQLITE;
  sqlite3_bind_int64(st, 1, episode_id);
  sqlite3_bind_double(st, 2, km_store_now());
  sqlite3_bind_text(st, 3, summary_json, -1, SQLITE_TRANSIENT);
  return run_once(s, st, "abandoning an episode");
}

/* The episode a gone holder left running, when its key is taken over. */
static int abandon_left(km_store *s, int64_t episode_id) {
  return abandon_running(s, episode_id,
                         "{\"note\":\"left running by a run that is gone; its key was taken over\"}");
}

int km_lease_abandon(km_store *s, const char *key, int64_t episode_id, const char *summary_json,
                     int *abandoned) {
  km_store_begin_call(s);
  *abandoned = 0;
  if (!key) return km_store_set_error(s, KM_EINVAL, "INVALID", "lease: no key");
  int rc = exec(s, "BEGIN IMMEDIATE", "abandoning an episode");
  if (rc) return rc;
  km_lease l;
  int found;
  if ((rc = read_lease(s, key, &l, &found))) goto rollback;
  if (!(found && l.alive && (l.episode_id == 0 || l.episode_id == episode_id))) {
    if ((rc = abandon_running(s, episode_id, summary_json))) goto rollback;
    *abandoned = sqlite3_changes(km_store_sqlite(s)) > 0;
  }
  if ((rc = exec(s, "COMMIT", "abandoning an episode"))) goto rollback;
  return KM_OK;
rollback:
  sqlite3_exec(km_store_sqlite(s), "ROLLBACK", NULL, NULL, NULL);
  *abandoned = 0;
  return rc;
}

static int take(km_store *s, const char *key, int64_t run_id, double ttl) {
  char host[256];
  host_name(host, sizeof host);
  double now = km_store_now();
  sqlite3_stmt *st = prepare(s,
      "INSERT OR REPLACE INTO leases(key, run_id, episode_id, host, pid, state, status, "
      "taken_at, expires_at, done_at) VALUES (?1, ?2, NULL, ?3, ?4, 'live', NULL, ?5, ?6, NULL)",
      key, "taking a lease");
  if (!st) return KM_STORE_ESQLITE;
  sqlite3_bind_int64(st, 2, run_id);
  if (host[0]) sqlite3_bind_text(st, 3, host, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)getpid());
  sqlite3_bind_double(st, 5, now);
  sqlite3_bind_double(st, 6, now + ttl);
  return run_once(s, st, "taking a lease");
}

/* Inside the claim's transaction: what the lease found says, and the claim when it is free. */
/* Whether status is a word of the comma-separated list. */
static int listed(const char *status, const char *list) {
  size_t n = strlen(status);
  for (const char *p = list; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && !strncmp(p, status, n)) return 1;
    p = end ? end + 1 : NULL;
  }
  return 0;
}

static int decide(km_store *s, const char *key, int64_t run_id, int64_t seen, double ttl,
                  const char *redo, int *result, km_lease *holder) {
  km_lease l;
  int found, rc;
  if ((rc = read_lease(s, key, &l, &found))) return rc;
  if (found && l.run_id != run_id) {
    if (l.alive) *result = KM_LEASE_HELD;
    else if (!strcmp(l.state, "done") && l.episode_id > seen && !listed(l.status, redo))
      *result = KM_LEASE_DONE;
    if (*result != KM_LEASE_TAKEN) {
      if (holder) *holder = l;
      return KM_OK;
    }
    if (!strcmp(l.state, "live") && l.episode_id > 0 && (rc = abandon_left(s, l.episode_id)))
      return rc;
  }
  return take(s, key, run_id, ttl);
}

int km_lease_claim(km_store *s, const char *key, int64_t run_id, int64_t seen_episode, double ttl,
                   const char *redo, int *result, km_lease *holder) {
  km_store_begin_call(s);
  *result = KM_LEASE_TAKEN;
  if (!key || ttl <= 0)
    return km_store_set_error(s, KM_EINVAL, "INVALID", "lease: a key and a positive ttl are needed");
  int rc = exec(s, "BEGIN IMMEDIATE", "claiming an episode");
  if (rc) return rc;
  if ((rc = decide(s, key, run_id, seen_episode, ttl, redo, result, holder)) ||
      (rc = exec(s, "COMMIT", "claiming an episode"))) {
    sqlite3_exec(km_store_sqlite(s), "ROLLBACK", NULL, NULL, NULL);
    *result = KM_LEASE_TAKEN;
  }
  return rc;
}

/* Runs an UPDATE/DELETE on ?1 key, ?2 run_id and, where it has one, ?3 x, that must touch one
 * row of this run's. */
static int own_row(km_store *s, const char *sql, const char *key, int64_t run_id, int64_t x,
                   const char *what) {
  km_store_begin_call(s);
  if (!key) return km_store_set_error(s, KM_EINVAL, "INVALID", "lease: no key");
  sqlite3_stmt *st = prepare(s, sql, key, what);
  if (!st) return KM_STORE_ESQLITE;
  sqlite3_bind_int64(st, 2, run_id);
  if (sqlite3_bind_parameter_count(st) >= 3) sqlite3_bind_int64(st, 3, x);
  int rc = run_once(s, st, what);
  if (rc) return rc;
  if (sqlite3_changes(km_store_sqlite(s)) == 0)
    return km_store_set_error(s, KM_ENOTFOUND, "NOT_FOUND", "%s: run %lld holds no lease on %s",
                              what, (long long)run_id, key);
  return KM_OK;
}

int km_lease_bind(km_store *s, const char *key, int64_t run_id, int64_t episode_id) {
  return own_row(s, "UPDATE leases SET episode_id = ?3 WHERE key = ?1 AND run_id = ?2 "
                    "AND state = 'live'", key, run_id, episode_id, "binding a lease");
}

int km_lease_drop(km_store *s, const char *key, int64_t run_id) {
  return own_row(s, "DELETE FROM leases WHERE key = ?1 AND run_id = ?2 AND state = 'live' "
                    "AND episode_id IS NULL", key, run_id, 0, "dropping a lease");
}

int km_lease_renew(km_store *s, int64_t run_id, double ttl, int *n) {
  km_store_begin_call(s);
  sqlite3_stmt *st = prepare(s, "UPDATE leases SET expires_at = ?3 WHERE run_id = ?1 AND "
                                "pid = ?2 AND state = 'live'", NULL, "renewing leases");
  if (!st) return KM_STORE_ESQLITE;
  sqlite3_bind_int64(st, 1, run_id);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)getpid());
  sqlite3_bind_double(st, 3, km_store_now() + ttl);
  int rc = run_once(s, st, "renewing leases");
  if (!rc && n) *n = sqlite3_changes(km_store_sqlite(s));
  return rc;
}
