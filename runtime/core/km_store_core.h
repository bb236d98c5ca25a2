/* km_store_core.h — the trajectory store in pure C: one SQLite file of runs, episodes and
 * their steps (schema and guarantees in docs/store.md). No lua_State here; km_store.c is
 * the Lua binding and tests/c/test_store.c tests this directly.
 *
 * Ownership: km_store_open allocates the handle and km_store_close frees it (and its
 * prepared statements); JSON arguments are text the caller owns, copied by SQLite. Strings
 * in the row structs filled by the readers point into SQLite's memory and stay valid only
 * until the next call that uses the same reader (or km_store_close).
 *
 * Status: functions return 0 (KM_OK) or a negative code: KM_E* from km.h, or
 * KM_STORE_ESQLITE when SQLite failed. km_store_errmsg() says what went wrong and
 * km_store_errcode() names it with a stable string ("SQLITE_BUSY", "NOT_FOUND", ...). */
#ifndef KM_STORE_CORE_H
#define KM_STORE_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "km.h"

/* Version 2 named the episodes' repeat number `rep` (it was `seed` in version 1). A version 1
 * store is migrated when opened for writing, and read as it is when opened read-only. */
#define KM_STORE_SCHEMA_VERSION 2

/* An SQLite call failed; km_store_sqlite_rc() has its (extended) result code. */
#define KM_STORE_ESQLITE (-100)

typedef struct km_store km_store;

/* Options for km_store_open. */
enum {
  KM_STORE_READONLY = 1,   /* open an existing store for reading only */
  KM_STORE_SYNC_FULL = 2,  /* synchronous=FULL: fsync every commit (default NORMAL) */
};

/* Opens (creating when needed, unless read-only) the store at path. *out is set whenever
 * memory allowed, even on failure, so the caller can read the message; close it either way. */
int km_store_open(const char *path, int flags, km_store **out);
void km_store_close(km_store *s); /* NULL is fine */

const char *km_store_errmsg(const km_store *s);  /* "" after success */
const char *km_store_errcode(const km_store *s); /* "SQLITE_CANTOPEN", "NOT_FOUND", ... */
int km_store_sqlite_rc(const km_store *s);       /* the last SQLite result code */
const char *km_store_path(const km_store *s);

/* Seconds since the Unix epoch, with fraction (CLOCK_REALTIME). */
double km_store_now(void);

/* ---- writers: each is one SQL statement, so a killed process keeps it whole or not at all ---- */

/* name, config_json, uuid may be NULL (uuid NULL: a random one). Host and kmrun version are
 * filled in here. */
int km_store_begin_run(km_store *s, const char *name, const char *config_json, const char *uuid,
                       int64_t *run_id);
int km_store_finish_run(km_store *s, int64_t run_id, const char *status);

typedef struct {
  const char *task, *strategy, *model, *uuid; /* each may be NULL */
  int64_t rep;                                /* the repeat number (1..K of a sweep's --repeat) */
  int has_rep;
} km_store_episode_info;

int km_store_begin_episode(km_store *s, int64_t run_id, const km_store_episode_info *info,
                           int64_t *episode_id);

/* Appends a step with the next seq of that episode (1, 2, ...), given back in *seq.
 * started_at < 0: now. duration_ms < 0: unknown (NULL). */
int km_store_append(km_store *s, int64_t episode_id, const char *kind, const char *payload_json,
                    double started_at, double duration_ms, int64_t *seq);

/* final_json and summary_json may be NULL. */
int km_store_finish_episode(km_store *s, int64_t episode_id, const char *status,
                            const char *final_json, const char *summary_json);

/* Runs SQL text (several statements allowed) for tests and maintenance. When first is not
 * NULL it receives the first column of the first result row as text (truncated to n bytes;
 * "" for NULL) and *has_row says whether there was one: "PRAGMA integrity_check" -> "ok". */
int km_store_exec(km_store *s, const char *sql, char *first, size_t n, int *has_row);

/* ---- readers ---- */

typedef struct {
  int64_t id;
  const char *uuid, *name, *status, *config_json, *host, *kmrun_version; /* NULL: SQL NULL */
  double started_at, finished_at;
  int has_finished;
} km_store_run;

typedef struct {
  int64_t id, run_id, rep;
  int has_rep, has_finished;
  const char *uuid, *task, *strategy, *model, *status, *final_json, *summary_json;
  double started_at, finished_at;
} km_store_episode;

typedef struct {
  int64_t seq;
  const char *kind, *payload_json;
  size_t payload_len;
  double started_at, duration_ms;
  int has_duration;
} km_store_step;

/* Filters for listing episodes; a NULL string or has_run_id = 0 matches everything. */
typedef struct {
  int64_t run_id;
  int has_run_id;
  const char *task, *status;
} km_store_filter;

/* One episode by id: 0, or KM_ENOTFOUND. */
int km_store_get_episode(km_store *s, int64_t id, km_store_episode *out);

/* Cursors: *_query starts (and restarts) one; *_next gives 1 and a row, 0 at the end, or a
 * negative status. Each kind of cursor is one at a time; different kinds may interleave. */
int km_store_episodes_query(km_store *s, const km_store_filter *f);
int km_store_episodes_next(km_store *s, km_store_episode *out);
int km_store_steps_query(km_store *s, int64_t episode_id);
int km_store_steps_next(km_store *s, km_store_step *out);
int km_store_runs_query(km_store *s);
int km_store_runs_next(km_store *s, km_store_run *out);

/* ---- for the store's other files (km_lease_core.c), not for callers ---- */

struct sqlite3;
struct sqlite3 *km_store_sqlite(km_store *s);
/* Records a failure (km_store_errmsg/errcode); returns status. */
int km_store_set_error(km_store *s, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Records an SQLite failure of what; returns KM_STORE_ESQLITE (KM_ENOMEM when out of memory). */
int km_store_sqlite_error(km_store *s, int rc, const char *what);
/* What every call does first: clears the last error and ends the readers' cursors. */
void km_store_begin_call(km_store *s);

#endif
