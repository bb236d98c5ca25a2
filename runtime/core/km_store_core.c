/* km_store_core.c — the trajectory store writer and reader on SQLite (see km_store_core.h,
 * docs/store.md). Pure C: no lua_State.
 *
 * Every write is one SQL statement in autocommit mode, so it is one transaction: a process
 * killed at any point leaves each step, episode and run either whole or absent. WAL mode
 * lets readers (another process exporting, a dashboard) read while a driver writes, and
 * synchronous=NORMAL under WAL keeps every commit across a process crash (only an OS crash
 * or power loss can drop the last few). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "km.h"
#include "km_store_core.h"
#include "km_scrub_core.h"
#include "km_hash_core.h"

/* ---- the schema (docs/store.md documents every column) ---- */

static const char SCHEMA_SQL[] =
    "CREATE TABLE IF NOT EXISTS meta(\n"
    "  key TEXT PRIMARY KEY,\n"
    "  value TEXT NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS runs(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  uuid TEXT NOT NULL UNIQUE,\n"
    "  name TEXT,\n"
    "  started_at REAL NOT NULL,\n"
    "  finished_at REAL,\n"
    "  status TEXT NOT NULL DEFAULT 'running',\n"
    "  config TEXT,\n"
    "  host TEXT,\n"
    "  kmrun_version TEXT);\n"
    "CREATE TABLE IF NOT EXISTS episodes(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "  uuid TEXT NOT NULL UNIQUE,\n"
    "  task TEXT,\n"
    "  strategy TEXT,\n"
    "  model TEXT,\n"
    "  rep INTEGER,\n"
    "  started_at REAL NOT NULL,\n"
    "  finished_at REAL,\n"
    "  status TEXT NOT NULL DEFAULT 'running',\n"
    "  final TEXT,\n"
    "  summary TEXT);\n"
    "CREATE TABLE IF NOT EXISTS steps(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  episode_id INTEGER NOT NULL REFERENCES episodes(id) ON DELETE CASCADE,\n"
    "  seq INTEGER NOT NULL CHECK (seq >= 1),\n"
    "  kind TEXT NOT NULL,\n"
    "  payload TEXT NOT NULL,\n"
    "  started_at REAL NOT NULL,\n"
    "  duration_ms REAL,\n"
    "  UNIQUE (episode_id, seq));\n"
    /* steps(episode_id) lookups use the UNIQUE (episode_id, seq) index: a second index
     * on episode_id alone would only slow every append. */
    "CREATE INDEX IF NOT EXISTS episodes_run_id ON episodes(run_id);\n"
    "CREATE INDEX IF NOT EXISTS episodes_task ON episodes(task);\n";

/* Leases (km_lease_core.h): which run holds which episode key. Added to version 2 stores
 * when they are opened for writing (CREATE ... IF NOT EXISTS): a kmrun that does not know
 * them reads the store as before. The trigger ends an episode's lease in the statement that
 * ends the episode, so a process killed between the two cannot leave a finished episode
 * leased. */
static const char LEASES_SQL[] =
    "CREATE TABLE IF NOT EXISTS leases(\n"
    "  key TEXT PRIMARY KEY,\n"
    "  run_id INTEGER NOT NULL,\n"
    "  episode_id INTEGER,\n"
    "  host TEXT,\n"
    "  pid INTEGER,\n"
    "  state TEXT NOT NULL,\n"
    "  status TEXT,\n"
    "  taken_at REAL NOT NULL,\n"
    "  expires_at REAL NOT NULL,\n"
    "  done_at REAL);\n"
    "CREATE INDEX IF NOT EXISTS leases_episode ON leases(episode_id);\n"
    "CREATE TRIGGER IF NOT EXISTS leases_done AFTER UPDATE OF status ON episodes\n"
    "  WHEN NEW.status <> 'running' BEGIN\n"
    "    UPDATE leases SET state = 'done', status = NEW.status, done_at = NEW.finished_at\n"
    "      WHERE episode_id = NEW.id AND state = 'live';\n"
    "  END;\n";

/* ---- prepared statements ---- */

enum {
  ST_INS_RUN,
  ST_FIN_RUN,
  ST_INS_EP,
  ST_APPEND,
  ST_SEQ_OF,
  ST_FIN_EP,
  ST_GET_EP,
  ST_STEPS,
  ST_RUNS,
  ST_COUNT
};

/* "%s" is the repeat column: rep, or seed in a version 1 store opened read-only. */
#define EPISODE_COLS \
  "id, run_id, uuid, task, strategy, model, %s, started_at, finished_at, status, final, summary"

static const char *const STMT_SQL[ST_COUNT] = {
    [ST_INS_RUN] = "INSERT INTO runs(uuid, name, started_at, status, config, host, kmrun_version) "
                   "VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6)",
    [ST_FIN_RUN] = "UPDATE runs SET finished_at = ?2, status = ?3 WHERE id = ?1",
    [ST_INS_EP] = "INSERT INTO episodes(run_id, uuid, task, strategy, model, %s, started_at, status) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running')",
    /* seq = max + 1 inside the one INSERT: the statement holds the write lock while it
     * reads the max, so two writers cannot take the same seq (UNIQUE would refuse it). */
    [ST_APPEND] = "INSERT INTO steps(episode_id, seq, kind, payload, started_at, duration_ms) "
                  "SELECT ?1, coalesce(max(seq), 0) + 1, ?2, ?3, ?4, ?5 FROM steps WHERE episode_id = ?1",
    /* RETURNING needs SQLite 3.35; GPU hosts may have an older one. */
    [ST_SEQ_OF] = "SELECT seq FROM steps WHERE id = ?1",
    [ST_FIN_EP] = "UPDATE episodes SET finished_at = ?2, status = ?3, final = ?4, summary = ?5 "
                  "WHERE id = ?1",
    [ST_GET_EP] = "SELECT " EPISODE_COLS " FROM episodes WHERE id = ?1",
    [ST_STEPS] = "SELECT seq, kind, payload, started_at, duration_ms FROM steps "
                 "WHERE episode_id = ?1 ORDER BY seq",
    [ST_RUNS] = "SELECT id, uuid, name, started_at, finished_at, status, config, host, kmrun_version "
                "FROM runs ORDER BY id",
};

struct km_store {
  sqlite3 *db;
  char *path;
  int rc;              /* last SQLite result code */
  char errmsg[512];
  char errcode[40];
  const char *rep_col; /* the episodes' repeat column: "rep", or "seed" in version 1 */
  sqlite3_stmt *st[ST_COUNT];
  sqlite3_stmt *list[8]; /* episode listings, one per filter combination, prepared on use */
  sqlite3_stmt *list_cur;
  char *rowbuf;        /* copies of the strings km_store_get_episode hands out */
  size_t rowcap;
};

/* ---- errors ---- */

static const char *sqlite_code_name(int rc) {
  static const char *const names[] = {
      "SQLITE_OK", "SQLITE_ERROR", "SQLITE_INTERNAL", "SQLITE_PERM", "SQLITE_ABORT",
      "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_NOMEM", "SQLITE_READONLY", "SQLITE_INTERRUPT",
      "SQLITE_IOERR", "SQLITE_CORRUPT", "SQLITE_NOTFOUND", "SQLITE_FULL", "SQLITE_CANTOPEN",
      "SQLITE_PROTOCOL", "SQLITE_EMPTY", "SQLITE_SCHEMA", "SQLITE_TOOBIG", "SQLITE_CONSTRAINT",
      "SQLITE_MISMATCH", "SQLITE_MISUSE", "SQLITE_NOLFS", "SQLITE_AUTH", "SQLITE_FORMAT",
      "SQLITE_RANGE", "SQLITE_NOTADB", "SQLITE_NOTICE", "SQLITE_WARNING"};
  int primary = rc & 0xFF;
  if (primary >= 0 && primary < (int)(sizeof names / sizeof *names)) return names[primary];
  if (primary == SQLITE_ROW) return "SQLITE_ROW";
  if (primary == SQLITE_DONE) return "SQLITE_DONE";
  return "SQLITE_ERROR";
}

static void clear_error(km_store *s) {
  s->errmsg[0] = '\0';
  s->errcode[0] = '\0';
}

/* fail: records a failure (km_store_errmsg/errcode) and returns status. The store's other
 * files call it as km_store_set_error. */
#define fail km_store_set_error

int km_store_set_error(km_store *s, int status, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
  va_end(ap);
  snprintf(s->errcode, sizeof s->errcode, "%s", code);
  return status;
}

/* Records an SQLite failure; call it before anything else touches the connection. */
static int fail_sqlite(km_store *s, int rc, const char *what) {
  s->rc = rc;
  const char *msg = s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
  fail(s, rc == SQLITE_NOMEM ? KM_ENOMEM : KM_STORE_ESQLITE, sqlite_code_name(rc), "%s: %s", what,
       msg);
  return rc == SQLITE_NOMEM ? KM_ENOMEM : KM_STORE_ESQLITE;
}

const char *km_store_errmsg(const km_store *s) { return s ? s->errmsg : "out of memory"; }
const char *km_store_errcode(const km_store *s) { return s ? s->errcode : "SQLITE_NOMEM"; }
int km_store_sqlite_rc(const km_store *s) { return s ? s->rc : SQLITE_NOMEM; }
const char *km_store_path(const km_store *s) { return s->path; }

/* ---- for the store's other files (km_lease_core.c) ---- */

sqlite3 *km_store_sqlite(km_store *s) { return s->db; }


int km_store_sqlite_error(km_store *s, int rc, const char *what) {
  return fail_sqlite(s, rc, what);
}

/* ---- small helpers ---- */

double km_store_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A random (version 4) UUID: ids that stay unique when stores from many hosts are merged. */
static void make_uuid(char out[37]) {
  unsigned char b[16];
  if (km_random_bytes(b, sizeof b) != 0) { /* no getrandom (old kernel, seccomp): weaker but still distinct */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 17) ^
                 (uint64_t)(uintptr_t)out;
    for (size_t i = 0; i < sizeof b; i++) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17; /* xorshift64 */
      b[i] = (unsigned char)x;
    }
  }
  b[6] = (unsigned char)((b[6] & 0x0F) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3F) | 0x80);
  snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

/* Every text a writer stores goes through here, with the process's secrets replaced
 * (km_scrub_core.h): a compile log or a model reply that quotes a key must not put it on
 * disk. Out of memory while scrubbing stores the mark alone rather than the text. */
static int bind_text(sqlite3_stmt *st, int i, const char *v) {
  if (!v) return sqlite3_bind_null(st, i);
  char *clean;
  size_t n;
  if (km_scrub(v, strlen(v), &clean, &n, NULL))
    return sqlite3_bind_text(st, i, KM_SCRUB_MARK, -1, SQLITE_STATIC);
  if (clean) return sqlite3_bind_text64(st, i, clean, n, free, SQLITE_UTF8);
  return sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
}

static const char *col_text(sqlite3_stmt *st, int i) {
  return sqlite3_column_type(st, i) == SQLITE_NULL ? NULL : (const char *)sqlite3_column_text(st, i);
}

/* Runs a statement that gives no rows, then resets it (so it holds no lock). */
static int run_stmt(km_store *s, sqlite3_stmt *st, const char *what) {
  int rc = sqlite3_step(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    fail_sqlite(s, rc, what);
    sqlite3_reset(st);
    return s->rc == SQLITE_NOMEM ? KM_ENOMEM : KM_STORE_ESQLITE;
  }
  sqlite3_reset(st);
  return KM_OK;
}

static int exec_sql(km_store *s, const char *sql, const char *what) {
  char *err = NULL;
  int rc = sqlite3_exec(s->db, sql, NULL, NULL, &err);
  if (rc != SQLITE_OK) {
    s->rc = rc;
    fail(s, rc == SQLITE_NOMEM ? KM_ENOMEM : KM_STORE_ESQLITE, sqlite_code_name(rc), "%s: %s",
         what, err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return rc == SQLITE_NOMEM ? KM_ENOMEM : KM_STORE_ESQLITE;
  }
  return KM_OK;
}

/* A single-value query (a PRAGMA): copies the first column of the first row into out. */
static int query_text(km_store *s, const char *sql, char *out, size_t n) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) return fail_sqlite(s, rc, sql);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(st, 0);
    snprintf(out, n, "%s", v ? v : "");
  } else if (rc == SQLITE_DONE) {
    out[0] = '\0';
  } else {
    fail_sqlite(s, rc, sql);
    sqlite3_finalize(st);
    return KM_STORE_ESQLITE;
  }
  sqlite3_finalize(st);
  return KM_OK;
}

/* A cursor left half-read keeps a read transaction open, and in WAL mode a write on this
 * connection then fails with SQLITE_BUSY_SNAPSHOT if another process committed meanwhile.
 * Writers end every cursor first. */
static void end_reads(km_store *s) {
  sqlite3_reset(s->st[ST_STEPS]);
  sqlite3_reset(s->st[ST_RUNS]);
  if (s->list_cur) sqlite3_reset(s->list_cur);
}

/* ---- open / close ---- */

/* Inside set_up's transaction: a new file's schema. user_version 0 is also any other
 * SQLite database: only an empty one becomes a store. */
static int create_schema(km_store *s) {
  char meta[512], ntables[32];
  int rc;
  if ((rc = query_text(s, "SELECT count(*) FROM sqlite_master", ntables, sizeof ntables))) return rc;
  if (strcmp(ntables, "0") != 0)
    return fail(s, KM_EINVAL, "SCHEMA_VERSION",
                "%s is not a kmrun store of schema version %d (user_version is 0, and it holds "
                "tables)", s->path, KM_STORE_SCHEMA_VERSION);
  snprintf(meta, sizeof meta,
           "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '%d'), "
           "('created_at', '%.6f'), ('created_by', 'kmrun %s');"
           "PRAGMA user_version = %d;",
           KM_STORE_SCHEMA_VERSION, km_store_now(), KM_VERSION, KM_STORE_SCHEMA_VERSION);
  if ((rc = exec_sql(s, SCHEMA_SQL, "creating the schema"))) return rc;
  return exec_sql(s, meta, "writing meta");
}

/* Inside set_up's transaction: 1 -> 2, the repeat number's column was called seed (it never
 * held a seed). */
static int migrate_v1(km_store *s) {
  char meta[512];
  snprintf(meta, sizeof meta,
           "ALTER TABLE episodes RENAME COLUMN seed TO rep;"
           "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '%d'), "
           "('migrated_from_1_at', '%.6f');"
           "PRAGMA user_version = %d;",
           KM_STORE_SCHEMA_VERSION, km_store_now(), KM_STORE_SCHEMA_VERSION);
  return exec_sql(s, meta, "migrating the store from schema version 1");
}

/* WAL mode on: journal_mode -> buf. Changing the mode takes the file's exclusive lock, and
 * SQLite answers SQLITE_BUSY there without calling the busy handler while another process
 * opens the same new file (three runs creating one store at once): tried again every 10 ms
 * for up to the busy timeout (5 s). A file already in WAL mode needs no change. */
static int use_wal(km_store *s, char *buf, size_t n) {
  int rc = query_text(s, "PRAGMA journal_mode", buf, n);
  if (rc || !strcmp(buf, "wal")) return rc;
  for (int waited_ms = 0;; waited_ms += 10) {
    rc = query_text(s, "PRAGMA journal_mode = WAL", buf, n);
    if (!rc || (s->rc & 0xff) != SQLITE_BUSY || waited_ms >= 5000) return rc;
    sqlite3_sleep(10);
  }
}

static int set_up(km_store *s, int flags) {
  int readonly = flags & KM_STORE_READONLY;
  int rc;
  char buf[64];
  sqlite3_busy_timeout(s->db, 5000);
  sqlite3_extended_result_codes(s->db, 1);
  if ((rc = exec_sql(s, "PRAGMA foreign_keys = ON", "enabling foreign keys"))) return rc;
  /* The first statement reads the file header: a file that is not a database fails here. */
  if ((rc = query_text(s, "PRAGMA user_version", buf, sizeof buf))) return rc;
  long version = strtol(buf, NULL, 10);

  s->rep_col = "rep";
  if (readonly) {
    /* version 1 is read as it is (nothing may be written to migrate it) */
    if (version == 1) s->rep_col = "seed";
    else if (version != KM_STORE_SCHEMA_VERSION)
      return fail(s, KM_EINVAL, "SCHEMA_VERSION",
                  "%s is not a kmrun store of schema version %d (user_version is %ld)", s->path,
                  KM_STORE_SCHEMA_VERSION, version);
  } else {
    int in_memory = !strcmp(s->path, ":memory:") || !*s->path;
    if ((rc = use_wal(s, buf, sizeof buf))) return rc;
    if (!in_memory && strcmp(buf, "wal") != 0)
      return fail(s, KM_EIO, "WAL_UNAVAILABLE",
                  "%s: cannot use WAL mode (journal_mode is '%s'); is it on a network file system?",
                  s->path, buf);
    if ((rc = exec_sql(s, (flags & KM_STORE_SYNC_FULL) ? "PRAGMA synchronous = FULL"
                                                         : "PRAGMA synchronous = NORMAL",
                       "setting synchronous")))
      return rc;
    /* Schema creation is one transaction: two processes opening a new file at once
     * serialize on BEGIN IMMEDIATE (busy_timeout waits), and the second sees version 1. */
    if ((rc = exec_sql(s, "BEGIN IMMEDIATE", "starting schema transaction"))) return rc;
    if ((rc = query_text(s, "PRAGMA user_version", buf, sizeof buf))) goto rollback;
    version = strtol(buf, NULL, 10);
    if (version == 0) {
      if ((rc = create_schema(s))) goto rollback;
    } else if (version == 1) {
      if ((rc = migrate_v1(s))) goto rollback;
    } else if (version != KM_STORE_SCHEMA_VERSION) {
      rc = fail(s, KM_EINVAL, "SCHEMA_VERSION",
                "%s has schema version %ld; this kmrun (%s) reads version %d", s->path, version,
                KM_VERSION, KM_STORE_SCHEMA_VERSION);
      goto rollback;
    }
    if ((rc = exec_sql(s, LEASES_SQL, "creating the leases table"))) goto rollback;
    if ((rc = exec_sql(s, "COMMIT", "committing the schema"))) goto rollback;
  }

  for (int i = 0; i < ST_COUNT; i++) {
    char sql[512];
    snprintf(sql, sizeof sql, STMT_SQL[i], s->rep_col); /* the ones with "%s" name the column */
    rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL);
    if (rc != SQLITE_OK) return fail_sqlite(s, rc, "preparing statements");
  }
  return KM_OK;

rollback:
  /* Keep the first error's message: the rollback's own result does not matter. */
  sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  return rc;
}

int km_store_open(const char *path, int flags, km_store **out) {
  *out = NULL;
  km_store *s = calloc(1, sizeof *s);
  if (!s) return KM_ENOMEM;
  *out = s;
  if (!path) return fail(s, KM_EINVAL, "INVALID", "no path given");
  s->path = strdup(path);
  if (!s->path) return fail(s, KM_ENOMEM, "SQLITE_NOMEM", "out of memory");

  int oflags = (flags & KM_STORE_READONLY) ? SQLITE_OPEN_READONLY
                                           : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  int rc = sqlite3_open_v2(path, &s->db, oflags, NULL);
  if (rc != SQLITE_OK) {
    /* SQLite says only "unable to open database file": say why when we can tell. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    struct stat st;
    const char *why = sqlite3_errstr(rc);
    char buf[4200];
    if ((flags & KM_STORE_READONLY) && stat(path, &st) != 0) {
      snprintf(buf, sizeof buf, "no such file (%s)", strerror(errno));
      why = buf;
    } else if (slash && slash != dir) {
      *slash = '\0';
      if (stat(dir, &st) != 0) {
        snprintf(buf, sizeof buf, "directory %s does not exist (create it first)", dir);
        why = buf;
      } else if (!S_ISDIR(st.st_mode)) {
        snprintf(buf, sizeof buf, "%s is not a directory", dir);
        why = buf;
      }
    }
    s->rc = rc;
    fail(s, KM_STORE_ESQLITE, sqlite_code_name(rc), "cannot open store %s: %s", path, why);
    return KM_STORE_ESQLITE;
  }
  rc = set_up(s, flags);
  if (rc == KM_OK) clear_error(s);
  return rc;
}

void km_store_close(km_store *s) {
  if (!s) return;
  for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
  for (int i = 0; i < 8; i++) sqlite3_finalize(s->list[i]);
  /* The last connection to close checkpoints the WAL into the main file and removes it. */
  if (s->db) sqlite3_close(s->db);
  free(s->rowbuf);
  free(s->path);
  free(s);
}

void km_store_begin_call(km_store *s) {
  clear_error(s);
  end_reads(s);
}

/* ---- writers ---- */

int km_store_begin_run(km_store *s, const char *name, const char *config_json, const char *uuid,
                       int64_t *run_id) {
  clear_error(s);
  end_reads(s);
  char id[37], host[256];
  if (!uuid) {
    make_uuid(id);
    uuid = id;
  }
  if (gethostname(host, sizeof host) != 0) host[0] = '\0';
  host[sizeof host - 1] = '\0';
  sqlite3_stmt *st = s->st[ST_INS_RUN];
  bind_text(st, 1, uuid);
  bind_text(st, 2, name);
  sqlite3_bind_double(st, 3, km_store_now());
  bind_text(st, 4, config_json);
  bind_text(st, 5, host[0] ? host : NULL);
  sqlite3_bind_text(st, 6, KM_VERSION, -1, SQLITE_STATIC);
  int rc = run_stmt(s, st, "beginning a run");
  sqlite3_clear_bindings(st);
  if (rc) return rc;
  *run_id = sqlite3_last_insert_rowid(s->db);
  return KM_OK;
}

int km_store_finish_run(km_store *s, int64_t run_id, const char *status) {
  clear_error(s);
  end_reads(s);
  sqlite3_stmt *st = s->st[ST_FIN_RUN];
  sqlite3_bind_int64(st, 1, run_id);
  sqlite3_bind_double(st, 2, km_store_now());
  bind_text(st, 3, status ? status : "done");
  int rc = run_stmt(s, st, "finishing a run");
  sqlite3_clear_bindings(st);
  if (rc) return rc;
  if (sqlite3_changes(s->db) == 0)
    return fail(s, KM_ENOTFOUND, "NOT_FOUND", "no run %lld", (long long)run_id);
  return KM_OK;
}

int km_store_begin_episode(km_store *s, int64_t run_id, const km_store_episode_info *info,
                           int64_t *episode_id) {
  clear_error(s);
  end_reads(s);
  static const km_store_episode_info none = {0};
  if (!info) info = &none;
  char id[37];
  const char *uuid = info->uuid;
  if (!uuid) {
    make_uuid(id);
    uuid = id;
  }
  sqlite3_stmt *st = s->st[ST_INS_EP];
  sqlite3_bind_int64(st, 1, run_id);
  bind_text(st, 2, uuid);
  bind_text(st, 3, info->task);
  bind_text(st, 4, info->strategy);
  bind_text(st, 5, info->model);
  if (info->has_rep) sqlite3_bind_int64(st, 6, info->rep);
  else sqlite3_bind_null(st, 6);
  sqlite3_bind_double(st, 7, km_store_now());
  int rc = run_stmt(s, st, "beginning an episode");
  sqlite3_clear_bindings(st);
  if (rc) {
    if (s->rc == SQLITE_CONSTRAINT_FOREIGNKEY)
      snprintf(s->errmsg, sizeof s->errmsg, "beginning an episode: no run %lld",
               (long long)run_id);
    return rc;
  }
  *episode_id = sqlite3_last_insert_rowid(s->db);
  return KM_OK;
}

int km_store_append(km_store *s, int64_t episode_id, const char *kind, const char *payload_json,
                    double started_at, double duration_ms, int64_t *seq) {
  clear_error(s);
  end_reads(s);
  if (!kind || !payload_json) return fail(s, KM_EINVAL, "INVALID", "append: kind and payload are required");
  sqlite3_stmt *st = s->st[ST_APPEND];
  sqlite3_bind_int64(st, 1, episode_id);
  bind_text(st, 2, kind);
  bind_text(st, 3, payload_json);
  sqlite3_bind_double(st, 4, started_at < 0 ? km_store_now() : started_at);
  if (duration_ms >= 0) sqlite3_bind_double(st, 5, duration_ms);
  else sqlite3_bind_null(st, 5);
  int rc = run_stmt(s, st, "appending a step");
  sqlite3_clear_bindings(st);
  if (rc) {
    if (s->rc == SQLITE_CONSTRAINT_FOREIGNKEY)
      snprintf(s->errmsg, sizeof s->errmsg, "appending a step: no episode %lld",
               (long long)episode_id);
    return rc;
  }
  /* Read back the seq the INSERT chose (no RETURNING before SQLite 3.35). */
  sqlite3_int64 rowid = sqlite3_last_insert_rowid(s->db);
  st = s->st[ST_SEQ_OF];
  sqlite3_bind_int64(st, 1, rowid);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    if (rc == SQLITE_DONE) rc = SQLITE_INTERNAL;
    fail_sqlite(s, rc, "reading the step's seq");
    sqlite3_reset(st);
    return KM_STORE_ESQLITE;
  }
  *seq = sqlite3_column_int64(st, 0);
  sqlite3_reset(st);
  return KM_OK;
}

int km_store_finish_episode(km_store *s, int64_t episode_id, const char *status,
                            const char *final_json, const char *summary_json) {
  clear_error(s);
  end_reads(s);
  sqlite3_stmt *st = s->st[ST_FIN_EP];
  sqlite3_bind_int64(st, 1, episode_id);
  sqlite3_bind_double(st, 2, km_store_now());
  bind_text(st, 3, status ? status : "done");
  bind_text(st, 4, final_json);
  bind_text(st, 5, summary_json);
  int rc = run_stmt(s, st, "finishing an episode");
  sqlite3_clear_bindings(st);
  if (rc) return rc;
  if (sqlite3_changes(s->db) == 0)
    return fail(s, KM_ENOTFOUND, "NOT_FOUND", "no episode %lld", (long long)episode_id);
  return KM_OK;
}

typedef struct {
  char *out;
  size_t n;
  int *has_row;
} first_row;

static int keep_first_row(void *ud, int ncols, char **vals, char **names) {
  (void)names;
  first_row *fr = ud;
  if (!*fr->has_row && ncols > 0) {
    *fr->has_row = 1;
    snprintf(fr->out, fr->n, "%s", vals[0] ? vals[0] : "");
  }
  return 0;
}

int km_store_exec(km_store *s, const char *sql, char *first, size_t n, int *has_row) {
  clear_error(s);
  end_reads(s);
  if (!first) return exec_sql(s, sql, "exec");
  int dummy;
  first_row fr = {first, n, has_row ? has_row : &dummy};
  *fr.has_row = 0;
  if (n) first[0] = '\0';
  char *err = NULL;
  int rc = sqlite3_exec(s->db, sql, keep_first_row, &fr, &err);
  if (rc != SQLITE_OK) {
    s->rc = rc;
    fail(s, rc == SQLITE_NOMEM ? KM_ENOMEM : KM_STORE_ESQLITE, sqlite_code_name(rc), "exec: %s",
         err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return rc == SQLITE_NOMEM ? KM_ENOMEM : KM_STORE_ESQLITE;
  }
  return KM_OK;
}

/* ---- readers ---- */

static void fill_episode(sqlite3_stmt *st, km_store_episode *e) {
  e->id = sqlite3_column_int64(st, 0);
  e->run_id = sqlite3_column_int64(st, 1);
  e->uuid = col_text(st, 2);
  e->task = col_text(st, 3);
  e->strategy = col_text(st, 4);
  e->model = col_text(st, 5);
  e->has_rep = sqlite3_column_type(st, 6) != SQLITE_NULL;
  e->rep = e->has_rep ? sqlite3_column_int64(st, 6) : 0;
  e->started_at = sqlite3_column_double(st, 7);
  e->has_finished = sqlite3_column_type(st, 8) != SQLITE_NULL;
  e->finished_at = e->has_finished ? sqlite3_column_double(st, 8) : 0;
  e->status = col_text(st, 9);
  e->final_json = col_text(st, 10);
  e->summary_json = col_text(st, 11);
}

/* Copies the episode's strings into s->rowbuf so the statement can be reset at once. */
static int keep_strings(km_store *s, km_store_episode *e) {
  const char **fields[] = {&e->uuid, &e->task, &e->strategy, &e->model,
                           &e->status, &e->final_json, &e->summary_json};
  size_t total = 0;
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
    if (*fields[i]) total += strlen(*fields[i]) + 1;
  if (total > s->rowcap) {
    char *p = realloc(s->rowbuf, total);
    if (!p) return fail(s, KM_ENOMEM, "SQLITE_NOMEM", "out of memory");
    s->rowbuf = p;
    s->rowcap = total;
  }
  char *p = s->rowbuf;
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
    if (!*fields[i]) continue;
    size_t n = strlen(*fields[i]) + 1;
    memcpy(p, *fields[i], n);
    *fields[i] = p;
    p += n;
  }
  return KM_OK;
}

int km_store_get_episode(km_store *s, int64_t id, km_store_episode *out) {
  clear_error(s);
  sqlite3_stmt *st = s->st[ST_GET_EP];
  sqlite3_reset(st);
  sqlite3_bind_int64(st, 1, id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_DONE) {
    sqlite3_reset(st);
    return fail(s, KM_ENOTFOUND, "NOT_FOUND", "no episode %lld", (long long)id);
  }
  if (rc != SQLITE_ROW) {
    fail_sqlite(s, rc, "reading an episode");
    sqlite3_reset(st);
    return KM_STORE_ESQLITE;
  }
  fill_episode(st, out);
  rc = keep_strings(s, out);
  sqlite3_reset(st);
  return rc;
}

int km_store_episodes_query(km_store *s, const km_store_filter *f) {
  clear_error(s);
  static const km_store_filter all = {0};
  if (!f) f = &all;
  int mask = (f->has_run_id ? 1 : 0) | (f->task ? 2 : 0) | (f->status ? 4 : 0);
  if (s->list_cur) sqlite3_reset(s->list_cur);
  if (!s->list[mask]) {
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT " EPISODE_COLS " FROM episodes WHERE 1%s%s%s ORDER BY id",
             s->rep_col, (mask & 1) ? " AND run_id = ?1" : "", (mask & 2) ? " AND task = ?2" : "",
             (mask & 4) ? " AND status = ?3" : "");
    int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->list[mask], NULL);
    if (rc != SQLITE_OK) return fail_sqlite(s, rc, "preparing the episode listing");
  }
  sqlite3_stmt *st = s->list_cur = s->list[mask];
  sqlite3_clear_bindings(st);
  if (mask & 1) sqlite3_bind_int64(st, 1, f->run_id);
  if (mask & 2) sqlite3_bind_text(st, 2, f->task, -1, SQLITE_TRANSIENT);
  if (mask & 4) sqlite3_bind_text(st, 3, f->status, -1, SQLITE_TRANSIENT);
  return KM_OK;
}

/* Steps a cursor: 1 with a row, 0 at the end (statement reset, its read lock let go). */
static int cursor_step(km_store *s, sqlite3_stmt *st, const char *what) {
  clear_error(s);
  if (!st) return fail(s, KM_EINVAL, "INVALID", "%s: no query started", what);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) return 1;
  if (rc == SQLITE_DONE) {
    sqlite3_reset(st);
    return 0;
  }
  fail_sqlite(s, rc, what);
  sqlite3_reset(st);
  return s->rc == SQLITE_NOMEM ? KM_ENOMEM : KM_STORE_ESQLITE;
}

int km_store_episodes_next(km_store *s, km_store_episode *out) {
  int rc = cursor_step(s, s->list_cur, "listing episodes");
  if (rc == 1) fill_episode(s->list_cur, out);
  return rc;
}

int km_store_steps_query(km_store *s, int64_t episode_id) {
  clear_error(s);
  sqlite3_stmt *st = s->st[ST_STEPS];
  sqlite3_reset(st);
  sqlite3_bind_int64(st, 1, episode_id);
  return KM_OK;
}

int km_store_steps_next(km_store *s, km_store_step *out) {
  sqlite3_stmt *st = s->st[ST_STEPS];
  int rc = cursor_step(s, st, "reading steps");
  if (rc != 1) return rc;
  out->seq = sqlite3_column_int64(st, 0);
  out->kind = col_text(st, 1);
  out->payload_json = col_text(st, 2);
  out->payload_len = (size_t)sqlite3_column_bytes(st, 2);
  out->started_at = sqlite3_column_double(st, 3);
  out->has_duration = sqlite3_column_type(st, 4) != SQLITE_NULL;
  out->duration_ms = out->has_duration ? sqlite3_column_double(st, 4) : 0;
  return 1;
}

int km_store_runs_query(km_store *s) {
  clear_error(s);
  sqlite3_reset(s->st[ST_RUNS]);
  return KM_OK;
}

int km_store_runs_next(km_store *s, km_store_run *out) {
  sqlite3_stmt *st = s->st[ST_RUNS];
  int rc = cursor_step(s, st, "listing runs");
  if (rc != 1) return rc;
  out->id = sqlite3_column_int64(st, 0);
  out->uuid = col_text(st, 1);
  out->name = col_text(st, 2);
  out->started_at = sqlite3_column_double(st, 3);
  out->has_finished = sqlite3_column_type(st, 4) != SQLITE_NULL;
  out->finished_at = out->has_finished ? sqlite3_column_double(st, 4) : 0;
  out->status = col_text(st, 5);
  out->config_json = col_text(st, 6);
  out->host = col_text(st, 7);
  out->kmrun_version = col_text(st, 8);
  return 1;
}
