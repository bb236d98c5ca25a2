/* test_store.c — the pure C store core on real SQLite files in a temporary folder. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "km_store_core.h"
#include "km_lease_core.h"
#include "test.h"

static char dir[] = "/tmp/km_test_store_XXXXXX";
static char path[256];
static int nfile;

/* A fresh database path for each test. */
static const char *fresh(void) {
  snprintf(path, sizeof path, "%s/s%d.db", dir, ++nfile);
  return path;
}

/* A plain SQLite connection beside the store's, to look at the file from outside. */
static char *peek(const char *db_path, const char *sql) {
  static char out[256];
  sqlite3 *db;
  out[0] = '\0';
  if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    snprintf(out, sizeof out, "(open: %s)", sqlite3_errmsg(db));
  } else {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
      snprintf(out, sizeof out, "(prepare: %s)", sqlite3_errmsg(db));
    } else {
      if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(out, sizeof out, "%s", (const char *)sqlite3_column_text(st, 0));
      sqlite3_finalize(st);
    }
  }
  sqlite3_close(db);
  return out;
}

static km_store *open_rw(const char *p) {
  km_store *s = NULL;
  int rc = km_store_open(p, 0, &s);
  if (rc) {
    printf("# open %s: %s\n", p, km_store_errmsg(s));
    km_store_close(s);
    return NULL;
  }
  return s;
}

TEST(schema_created) {
  const char *p = fresh();
  km_store *s = open_rw(p);
  ASSERT(s);
  ASSERT_EQ_STR(peek(p, "PRAGMA user_version"), "2");
  char first[64];
  int has_row = -1;
  ASSERT_EQ_INT(km_store_exec(s, "PRAGMA integrity_check", first, sizeof first, &has_row), 0);
  ASSERT_EQ_INT(has_row, 1);
  ASSERT_EQ_STR(first, "ok");
  ASSERT_EQ_INT(km_store_exec(s, "CREATE TEMP TABLE x(a); DROP TABLE x", first, sizeof first,
                              &has_row), 0);
  ASSERT_EQ_INT(has_row, 0);
  ASSERT_EQ_INT(km_store_exec(s, "SELEKT 1", first, sizeof first, &has_row), KM_STORE_ESQLITE);
  ASSERT_EQ_STR(km_store_errcode(s), "SQLITE_ERROR");
  ASSERT_EQ_STR(peek(p, "SELECT value FROM meta WHERE key = 'schema_version'"), "2");
  ASSERT_EQ_STR(peek(p, "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master "
                        "WHERE type = 'table' ORDER BY name)"),
                "episodes,leases,meta,runs,steps");
  ASSERT_EQ_STR(peek(p, "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master "
                        "WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY name)"),
                "episodes_run_id,episodes_task,leases_episode");
  km_store_close(s);
  /* Opening again finds the schema and leaves it as it is. */
  s = open_rw(p);
  ASSERT(s);
  ASSERT_EQ_STR(peek(p, "SELECT count(*) FROM meta WHERE key = 'schema_version'"), "1");
  km_store_close(s);
}

TEST(wal_mode_on) {
  const char *p = fresh();
  km_store *s = open_rw(p);
  ASSERT(s);
  ASSERT_EQ_STR(peek(p, "PRAGMA journal_mode"), "wal");
  km_store_close(s);
}

TEST(seq_increments_per_episode) {
  km_store *s = open_rw(fresh());
  ASSERT(s);
  int64_t run, e1, e2, seq;
  ASSERT_EQ_INT(km_store_begin_run(s, "r", "{\"a\":1}", NULL, &run), 0);
  km_store_episode_info info = {.task = "l1_relu", .strategy = "repair", .rep = 3, .has_rep = 1};
  ASSERT_EQ_INT(km_store_begin_episode(s, run, &info, &e1), 0);
  ASSERT_EQ_INT(km_store_begin_episode(s, run, NULL, &e2), 0);
  ASSERT(e1 != e2);
  for (int i = 1; i <= 3; i++) {
    ASSERT_EQ_INT(km_store_append(s, e1, "note", "{}", -1, -1, &seq), 0);
    ASSERT_EQ_INT(seq, i);
  }
  ASSERT_EQ_INT(km_store_append(s, e2, "note", "[1]", -1, 2.5, &seq), 0);
  ASSERT_EQ_INT(seq, 1);
  ASSERT_EQ_INT(km_store_append(s, e1, "note", "{}", 1000.25, -1, &seq), 0);
  ASSERT_EQ_INT(seq, 4);

  ASSERT_EQ_INT(km_store_steps_query(s, e1), 0);
  km_store_step st;
  int n = 0;
  while (km_store_steps_next(s, &st) == 1) {
    n++;
    ASSERT_EQ_INT(st.seq, n);
    ASSERT_EQ_STR(st.kind, "note");
    ASSERT_EQ_STR(st.payload_json, "{}");
    ASSERT(!st.has_duration);
  }
  ASSERT_EQ_INT(n, 4);
  ASSERT_NEAR(st.started_at, 1000.25, 1e-9);
  km_store_close(s);
}

TEST(foreign_keys_enforced) {
  km_store *s = open_rw(fresh());
  ASSERT(s);
  int64_t id, seq;
  ASSERT_EQ_INT(km_store_begin_episode(s, 42, NULL, &id), KM_STORE_ESQLITE);
  ASSERT_EQ_STR(km_store_errcode(s), "SQLITE_CONSTRAINT");
  ASSERT(strstr(km_store_errmsg(s), "no run 42"));
  ASSERT_EQ_INT(km_store_append(s, 7, "note", "{}", -1, -1, &seq), KM_STORE_ESQLITE);
  ASSERT_EQ_INT(km_store_sqlite_rc(s), SQLITE_CONSTRAINT_FOREIGNKEY);
  ASSERT(strstr(km_store_errmsg(s), "no episode 7"));
  /* ...and the connection is fine afterwards. */
  ASSERT_EQ_INT(km_store_begin_run(s, NULL, NULL, NULL, &id), 0);
  ASSERT_EQ_STR(km_store_errmsg(s), "");
  km_store_close(s);
}

TEST(not_found) {
  km_store *s = open_rw(fresh());
  ASSERT(s);
  km_store_episode e;
  ASSERT_EQ_INT(km_store_get_episode(s, 5, &e), KM_ENOTFOUND);
  ASSERT_EQ_STR(km_store_errcode(s), "NOT_FOUND");
  ASSERT_EQ_INT(km_store_finish_episode(s, 5, "failed", NULL, NULL), KM_ENOTFOUND);
  ASSERT_EQ_INT(km_store_finish_run(s, 5, "done"), KM_ENOTFOUND);
  km_store_close(s);
}

TEST(reopen_keeps_data) {
  const char *p = fresh();
  km_store *s = open_rw(p);
  ASSERT(s);
  int64_t run, ep, seq;
  ASSERT_EQ_INT(km_store_begin_run(s, "keep", NULL, "run-uuid-1", &run), 0);
  km_store_episode_info info = {.task = "t", .model = "m"};
  ASSERT_EQ_INT(km_store_begin_episode(s, run, &info, &ep), 0);
  ASSERT_EQ_INT(km_store_append(s, ep, "prompt", "{\"text\":\"hi\"}", -1, -1, &seq), 0);
  ASSERT_EQ_INT(km_store_finish_episode(s, ep, "correct", "{\"src\":1}", NULL), 0);
  ASSERT_EQ_INT(km_store_finish_run(s, run, "done"), 0);
  km_store_close(s);

  s = NULL;
  ASSERT_EQ_INT(km_store_open(p, KM_STORE_READONLY, &s), 0);
  km_store_episode e;
  ASSERT_EQ_INT(km_store_get_episode(s, ep, &e), 0);
  ASSERT_EQ_STR(e.task, "t");
  ASSERT_EQ_STR(e.model, "m");
  ASSERT(e.strategy == NULL);
  ASSERT(!e.has_rep);
  ASSERT(e.has_finished);
  ASSERT(e.finished_at >= e.started_at);
  ASSERT_EQ_STR(e.status, "correct");
  ASSERT_EQ_STR(e.final_json, "{\"src\":1}");
  ASSERT(e.summary_json == NULL);
  ASSERT_EQ_INT(strlen(e.uuid), 36);
  ASSERT_EQ_INT(km_store_steps_query(s, ep), 0);
  km_store_step st;
  ASSERT_EQ_INT(km_store_steps_next(s, &st), 1);
  ASSERT_EQ_STR(st.payload_json, "{\"text\":\"hi\"}");
  ASSERT_EQ_INT(st.payload_len, 13);
  ASSERT_EQ_INT(km_store_steps_next(s, &st), 0);

  km_store_run r;
  ASSERT_EQ_INT(km_store_runs_query(s), 0);
  ASSERT_EQ_INT(km_store_runs_next(s, &r), 1);
  ASSERT_EQ_STR(r.uuid, "run-uuid-1");
  ASSERT_EQ_STR(r.name, "keep");
  ASSERT_EQ_STR(r.status, "done");
  ASSERT_EQ_STR(r.kmrun_version, KM_VERSION);
  ASSERT(r.host != NULL);
  ASSERT(r.config_json == NULL);
  ASSERT_EQ_INT(km_store_runs_next(s, &r), 0);

  /* Read-only means read-only. */
  int64_t id;
  ASSERT_EQ_INT(km_store_begin_run(s, NULL, NULL, NULL, &id), KM_STORE_ESQLITE);
  ASSERT_EQ_STR(km_store_errcode(s), "SQLITE_READONLY");
  km_store_close(s);
}

TEST(episode_filters) {
  km_store *s = open_rw(fresh());
  ASSERT(s);
  int64_t r1, r2, ep;
  ASSERT_EQ_INT(km_store_begin_run(s, NULL, NULL, NULL, &r1), 0);
  ASSERT_EQ_INT(km_store_begin_run(s, NULL, NULL, NULL, &r2), 0);
  const char *tasks[] = {"a", "b", "a", "c", "a"};
  for (int i = 0; i < 5; i++) {
    km_store_episode_info info = {.task = tasks[i]};
    ASSERT_EQ_INT(km_store_begin_episode(s, i < 3 ? r1 : r2, &info, &ep), 0);
    if (i % 2 == 0) ASSERT_EQ_INT(km_store_finish_episode(s, ep, "correct", NULL, NULL), 0);
  }
  struct { km_store_filter f; int want; } cases[] = {
      {{0}, 5},
      {{.run_id = r1, .has_run_id = 1}, 3},
      {{.task = "a"}, 3},
      {{.status = "correct"}, 3},
      {{.status = "running"}, 2},
      {{.run_id = r2, .has_run_id = 1, .task = "a", .status = "correct"}, 1},
      {{.task = "zzz"}, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    ASSERT_EQ_INT(km_store_episodes_query(s, &cases[c].f), 0);
    km_store_episode e;
    int n = 0, rc;
    int64_t last = 0;
    while ((rc = km_store_episodes_next(s, &e)) == 1) {
      ASSERT(e.id > last); /* ordered by id */
      last = e.id;
      n++;
    }
    ASSERT_EQ_INT(rc, 0);
    if (n != cases[c].want) T_FAIL("case %zu: %d episodes, want %d", c, n, cases[c].want);
  }
  km_store_close(s);
}

/* WAL: a second connection reads the last committed state while the first is in the
 * middle of a write transaction, without waiting for it. */
TEST(concurrent_reader) {
  const char *p = fresh();
  km_store *w = open_rw(p), *r = NULL;
  ASSERT(w);
  int64_t run, ep, seq;
  ASSERT_EQ_INT(km_store_begin_run(w, NULL, NULL, NULL, &run), 0);
  ASSERT_EQ_INT(km_store_begin_episode(w, run, NULL, &ep), 0);
  ASSERT_EQ_INT(km_store_append(w, ep, "note", "1", -1, -1, &seq), 0);
  ASSERT_EQ_INT(km_store_open(p, KM_STORE_READONLY, &r), 0);

  ASSERT_EQ_INT(km_store_exec(w, "BEGIN IMMEDIATE", NULL, 0, NULL), 0);
  ASSERT_EQ_INT(km_store_append(w, ep, "note", "2", -1, -1, &seq), 0);
  ASSERT_EQ_INT(seq, 2);

  double t0 = km_store_now();
  km_store_step st;
  int n = 0, rc;
  ASSERT_EQ_INT(km_store_steps_query(r, ep), 0);
  while ((rc = km_store_steps_next(r, &st)) == 1) n++;
  ASSERT_EQ_INT(rc, 0);
  ASSERT_EQ_INT(n, 1);                    /* the uncommitted step is not visible */
  ASSERT(km_store_now() - t0 < 1.0);      /* and reading did not wait on the writer */

  ASSERT_EQ_INT(km_store_exec(w, "COMMIT", NULL, 0, NULL), 0);
  n = 0;
  ASSERT_EQ_INT(km_store_steps_query(r, ep), 0);
  while (km_store_steps_next(r, &st) == 1) n++;
  ASSERT_EQ_INT(n, 2);
  km_store_close(r);

  /* Two writers on one file: each append still gets its own seq. */
  km_store *w2 = open_rw(p);
  ASSERT(w2);
  ASSERT_EQ_INT(km_store_append(w2, ep, "note", "3", -1, -1, &seq), 0);
  ASSERT_EQ_INT(seq, 3);
  ASSERT_EQ_INT(km_store_append(w, ep, "note", "4", -1, -1, &seq), 0);
  ASSERT_EQ_INT(seq, 4);
  km_store_close(w2);
  km_store_close(w);
}

TEST(bad_files) {
  km_store *s = NULL;
  char p[300];
  snprintf(p, sizeof p, "%s/no/such/dir/x.db", dir);
  ASSERT_EQ_INT(km_store_open(p, 0, &s), KM_STORE_ESQLITE);
  ASSERT_EQ_STR(km_store_errcode(s), "SQLITE_CANTOPEN");
  ASSERT(strstr(km_store_errmsg(s), "does not exist"));
  km_store_close(s);

  snprintf(p, sizeof p, "%s/garbage.db", dir);
  FILE *f = fopen(p, "w");
  ASSERT(f);
  for (int i = 0; i < 200; i++) fputs("this is not a database ", f);
  fclose(f);
  ASSERT_EQ_INT(km_store_open(p, 0, &s), KM_STORE_ESQLITE);
  ASSERT_EQ_STR(km_store_errcode(s), "SQLITE_NOTADB");
  km_store_close(s);

  /* A store from a newer kmrun is refused, not modified. */
  const char *q = fresh();
  s = open_rw(q);
  ASSERT(s);
  ASSERT_EQ_INT(km_store_exec(s, "PRAGMA user_version = 3", NULL, 0, NULL), 0);
  km_store_close(s);
  ASSERT_EQ_INT(km_store_open(q, 0, &s), KM_EINVAL);
  ASSERT_EQ_STR(km_store_errcode(s), "SCHEMA_VERSION");
  km_store_close(s);
  ASSERT_EQ_INT(km_store_open(q, KM_STORE_READONLY, &s), KM_EINVAL);
  km_store_close(s);
}

/* A store written by schema version 1 (the repeat number in a column named seed): read
 * as it is when opened read-only, migrated (seed renamed rep, values kept) when opened to
 * write. */
static void write_v1_store(const char *p) {
  sqlite3 *db;
  sqlite3_open(p, &db);
  sqlite3_exec(db,
               "PRAGMA journal_mode = WAL;"
               "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
               "CREATE TABLE runs(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, name TEXT,"
               "  started_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL DEFAULT 'running',"
               "  config TEXT, host TEXT, kmrun_version TEXT);"
               "CREATE TABLE episodes(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id)"
               "  ON DELETE CASCADE, uuid TEXT NOT NULL UNIQUE, task TEXT, strategy TEXT, model TEXT,"
               "  seed INTEGER, started_at REAL NOT NULL, finished_at REAL,"
               "  status TEXT NOT NULL DEFAULT 'running', final TEXT, summary TEXT);"
               "CREATE TABLE steps(id INTEGER PRIMARY KEY, episode_id INTEGER NOT NULL REFERENCES"
               "  episodes(id) ON DELETE CASCADE, seq INTEGER NOT NULL CHECK (seq >= 1), kind TEXT NOT NULL,"
               "  payload TEXT NOT NULL, started_at REAL NOT NULL, duration_ms REAL, UNIQUE (episode_id, seq));"
               "INSERT INTO meta VALUES ('schema_version', '1');"
               "INSERT INTO runs(uuid, started_at, status) VALUES ('r1', 1.0, 'finished');"
               "INSERT INTO episodes(run_id, uuid, task, strategy, seed, started_at, status)"
               "  VALUES (1, 'e1', 'l1_relu', 'repair', 4, 1.0, 'correct');"
               "PRAGMA user_version = 1;",
               NULL, NULL, NULL);
  sqlite3_close(db);
}

TEST(migrates_version_1) {
  const char *p = fresh();
  write_v1_store(p);
  ASSERT_EQ_STR(peek(p, "PRAGMA user_version"), "1");

  km_store *s = NULL;
  ASSERT_EQ_INT(km_store_open(p, KM_STORE_READONLY, &s), 0);
  km_store_episode e;
  ASSERT_EQ_INT(km_store_episodes_query(s, NULL), 0);
  ASSERT_EQ_INT(km_store_episodes_next(s, &e), 1);
  ASSERT(e.has_rep);
  ASSERT_EQ_INT(e.rep, 4);
  ASSERT_EQ_INT(km_store_episodes_next(s, &e), 0);
  ASSERT_EQ_INT(km_store_get_episode(s, 1, &e), 0);
  ASSERT_EQ_INT(e.rep, 4);
  km_store_close(s);
  ASSERT_EQ_STR(peek(p, "PRAGMA user_version"), "1"); /* read-only: untouched */

  s = open_rw(p);
  ASSERT(s);
  ASSERT_EQ_STR(peek(p, "PRAGMA user_version"), "2");
  ASSERT_EQ_STR(peek(p, "SELECT rep FROM episodes WHERE uuid = 'e1'"), "4");
  ASSERT_EQ_STR(peek(p, "SELECT value FROM meta WHERE key = 'schema_version'"), "2");
  km_store_episode_info info = {.task = "l1_relu", .strategy = "repair", .rep = 5, .has_rep = 1};
  int64_t ep;
  ASSERT_EQ_INT(km_store_begin_episode(s, 1, &info, &ep), 0);
  ASSERT_EQ_INT(km_store_get_episode(s, ep, &e), 0);
  ASSERT_EQ_INT(e.rep, 5);
  km_store_close(s);
  ASSERT_EQ_STR(peek(p, "PRAGMA integrity_check"), "ok");
}

TEST(uuids_are_distinct_v4) {
  km_store *s = open_rw(fresh());
  ASSERT(s);
  int64_t a, b;
  ASSERT_EQ_INT(km_store_begin_run(s, NULL, NULL, NULL, &a), 0);
  ASSERT_EQ_INT(km_store_begin_run(s, NULL, NULL, NULL, &b), 0);
  ASSERT_EQ_INT(km_store_runs_query(s), 0);
  km_store_run r;
  char first[40];
  ASSERT_EQ_INT(km_store_runs_next(s, &r), 1);
  snprintf(first, sizeof first, "%s", r.uuid);
  ASSERT_EQ_INT(km_store_runs_next(s, &r), 1);
  ASSERT(strcmp(first, r.uuid) != 0);
  ASSERT_EQ_INT(r.uuid[14], '4');
  ASSERT(strchr("89ab", r.uuid[19]));
  /* A duplicate uuid is refused by the UNIQUE constraint. */
  ASSERT_EQ_INT(km_store_begin_run(s, NULL, NULL, first, &a), KM_STORE_ESQLITE);
  ASSERT_EQ_STR(km_store_errcode(s), "SQLITE_CONSTRAINT");
  km_store_close(s);
}

/* Leases: one holder at a time, the trigger ends a lease with its episode, a lease whose
 * episode another run finished is not taken by a run that planned before it. */
TEST(leases) {
  const char *p = fresh();
  km_store *s = open_rw(p);
  ASSERT(s);
  int64_t a, b, ep;
  ASSERT_EQ_INT(km_store_begin_run(s, "a", NULL, NULL, &a), 0);
  ASSERT_EQ_INT(km_store_begin_run(s, "b", NULL, NULL, &b), 0);
  int result = -1, n = -1;
  km_lease holder;
  ASSERT_EQ_INT(km_lease_claim(s, "k", a, 0, 60, NULL, &result, &holder), 0);
  ASSERT_EQ_INT(result, KM_LEASE_TAKEN);
  ASSERT_EQ_INT(km_lease_claim(s, "k", b, 0, 60, NULL, &result, &holder), 0);
  ASSERT_EQ_INT(result, KM_LEASE_HELD);
  ASSERT_EQ_INT((int)holder.run_id, (int)a);
  ASSERT_EQ_INT(holder.alive, 1);
  km_store_episode_info info = {.task = "t", .strategy = "s", .model = "m", .rep = 1, .has_rep = 1};
  ASSERT_EQ_INT(km_store_begin_episode(s, a, &info, &ep), 0);
  ASSERT_EQ_INT(km_lease_bind(s, "k", a, ep), 0);
  ASSERT_EQ_INT(km_lease_bind(s, "k", b, ep), KM_ENOTFOUND); /* b holds nothing */
  ASSERT_EQ_INT(km_lease_renew(s, a, 120, &n), 0);
  ASSERT_EQ_INT(n, 1);
  ASSERT_EQ_INT(km_store_finish_episode(s, ep, "correct", NULL, NULL), 0);
  ASSERT_EQ_STR(peek(p, "SELECT state || ' ' || status FROM leases WHERE key = 'k'"), "done correct");
  ASSERT_EQ_INT(km_lease_claim(s, "k", b, 0, 60, NULL, &result, &holder), 0);
  ASSERT_EQ_INT(result, KM_LEASE_DONE);
  ASSERT_EQ_INT((int)holder.episode_id, (int)ep);
  ASSERT_EQ_INT(km_lease_claim(s, "k", b, ep, 60, NULL, &result, &holder), 0);
  ASSERT_EQ_INT(result, KM_LEASE_TAKEN);
  ASSERT_EQ_INT(km_lease_drop(s, "k", b), 0);
  int found = -1;
  ASSERT_EQ_INT(km_lease_get(s, "k", &holder, &found), 0);
  ASSERT_EQ_INT(found, 0);
  ASSERT_EQ_INT(km_lease_claim(s, "k", a, 0, 0, NULL, &result, &holder), KM_EINVAL);
  /* an episode that ended on a status that runs again (redo) is taken again */
  int64_t ep2;
  int abandoned = -1;
  ASSERT_EQ_INT(km_lease_claim(s, "k2", a, 0, 60, NULL, &result, &holder), 0);
  ASSERT_EQ_INT(km_store_begin_episode(s, a, &info, &ep2), 0);
  ASSERT_EQ_INT(km_lease_bind(s, "k2", a, ep2), 0);
  /* a live lease names it: not abandoned */
  ASSERT_EQ_INT(km_lease_abandon(s, "k2", ep2, "{}", &abandoned), 0);
  ASSERT_EQ_INT(abandoned, 0);
  ASSERT_EQ_INT(km_store_finish_episode(s, ep2, "interrupted", NULL, NULL), 0);
  /* finished: not abandoned either */
  ASSERT_EQ_INT(km_lease_abandon(s, "k2", ep2, "{}", &abandoned), 0);
  ASSERT_EQ_INT(abandoned, 0);
  ASSERT_EQ_STR(peek(p, "SELECT status FROM episodes WHERE id = 2"), "interrupted");
  ASSERT_EQ_INT(km_lease_claim(s, "k2", b, 0, 60, "abandoned,interrupted", &result, &holder), 0);
  ASSERT_EQ_INT(result, KM_LEASE_TAKEN);
  km_store_close(s);
}

/* Processes opening one new file at the same moment (a pipe's close starts them all) all
 * get a store: the switch to WAL mode answers SQLITE_BUSY without the busy handler while
 * another process creates the file, and the open tries it again. 16 rounds of 8. */
TEST(many_open_one_new_file) {
  enum { ROUNDS = 16, PROCS = 8 };
  for (int round = 0; round < ROUNDS; round++) {
    const char *p = fresh();
    int go[2];
    ASSERT(pipe(go) == 0);
    pid_t kids[PROCS];
    for (int i = 0; i < PROCS; i++) {
      kids[i] = fork();
      if (kids[i] == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) < 0) _exit(3);
        km_store *s = NULL;
        int rc = km_store_open(p, 0, &s);
        if (rc) fprintf(stdout, "# round %d process %d: %s\n", round, i, km_store_errmsg(s));
        fflush(stdout);
        km_store_close(s);
        _exit(rc ? 1 : 0);
      }
      ASSERT(kids[i] > 0);
    }
    close(go[0]);
    close(go[1]);
    int failed = 0;
    for (int i = 0; i < PROCS; i++) {
      int status = 0;
      waitpid(kids[i], &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
    ASSERT_EQ_INT(failed, 0);
    ASSERT_EQ_STR(peek(p, "PRAGMA journal_mode"), "wal");
  }
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(schema_created);
  RUN(wal_mode_on);
  RUN(seq_increments_per_episode);
  RUN(foreign_keys_enforced);
  RUN(not_found);
  RUN(reopen_keeps_data);
  RUN(episode_filters);
  RUN(concurrent_reader);
  RUN(bad_files);
  RUN(migrates_version_1);
  RUN(uuids_are_distinct_v4);
  RUN(leases);
  RUN(many_open_one_new_file);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("# could not remove %s\n", dir);
  return DONE();
}
