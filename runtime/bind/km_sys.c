/* km_sys.c — `require "km.sys"`: the few things Lua's os and io libraries lack, so the
 * library never shells out for them (`ls`, `mkdir -p`, `nproc`, `test -t`, `kill -0`).
 *
 *   local sys = require "km.sys"
 *   sys.readdir("tasks")          -> { "l1_relu", ... } (sorted, no "." or "..") | nil, msg, CODE
 *   sys.mkdir("runs/a/b" [, mode]) -> true | nil, msg, CODE     (mkdir -p: parents too, 0777 & ~umask;
 *                                    mode: the last folder's, when it is made, e.g. 448 = 0700)
 *   sys.rmtree(dir)               -> true | nil, msg, CODE      (rm -rf: symlinks are removed, not followed)
 *   sys.create(path [, text])     -> true | nil, msg, CODE      (a new file holding text, 0600; EXISTS
 *                                    where the path exists: one of several processes claims it)
 *   sys.isatty(io.stdout | 1)     -> boolean
 *   sys.cpu_count()               -> n  (the CPUs this process may run on, as nproc counts them)
 *   sys.realpath(path)            -> absolute path | nil, msg, "NOT_FOUND"
 *   sys.spawn(argv [, opts])      -> pid | nil, msg, CODE      (opts: env = { NAME = value } added,
 *                                    stdout/stderr = "inherit" | "null"; stderr_file = a path its
 *                                    stderr is appended to; session = true: a session of its own,
 *                                    so a Ctrl-C at this terminal does not reach it; stdin is /dev/null)
 *   sys.wait(pid [, block])       -> false (still running) | true, "exit" | "signal", n | nil, msg, CODE
 *   sys.kill(pid [, "TERM" | "KILL" | "INT" | 0]) -> true | nil, msg, CODE
 *   sys.sleep(seconds)
 *   sys.uid()                     -> this process's effective user id (per-user paths: kmrun serve's socket)
 *   sys.pid()                     -> this process's id
 *   sys.random(n)                 -> an integer uniform in [1, n] (1 <= n <= 2^62) from the kernel's
 *                                    CSPRNG (getrandom), 8 fresh bytes a draw, nothing kept: what
 *                                    the judge draws (seeds, which calls are checked) is not
 *                                    predictable from earlier draws, nor from this process's memory.
 *                                    Raises where getrandom fails (there is no weaker fallback)
 *
 * CODEs: NOT_FOUND, NOT_DIR, EXISTS, ACCESS, NOT_CHILD, NO_PROCESS, SPAWN, IO.
 * Ownership: nothing is kept between calls; a spawned child is the caller's to wait for
 * (sys.wait reaps it), as with a shell's `&`. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "km.h"
#include "km_hash_core.h"

extern char **environ;

/* errno as the stable CODE of the expected-failure triple. */
static const char *errcode(int e) {
  switch (e) {
  case ENOENT: return "NOT_FOUND";
  case ENOTDIR: return "NOT_DIR";
  case EEXIST: return "EXISTS";
  case EACCES:
  case EPERM: return "ACCESS";
  case ECHILD: return "NOT_CHILD";
  case ESRCH: return "NO_PROCESS";
  default: return "IO";
  }
}

static int fail_errno(lua_State *L, const char *what, const char *path) {
  int e = errno;
  return km_fail(L, errcode(e), "%s %s: %s", what, path, strerror(e));
}

/* ==================================================================================== */
/* Folders                                                                               */
/* ==================================================================================== */

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* readdir(path) -> sorted names. Entries are copied into a Lua table as they are read
 * (nothing malloc'd is held across a call that can raise), then sorted by byte order. */
static int l_readdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  DIR *d = opendir(path);
  if (!d) return fail_errno(L, "cannot read the folder", path);
  lua_newtable(L); /* [names] */
  lua_Integer n = 0;
  struct dirent *e;
  errno = 0;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (!lua_checkstack(L, 2)) break;
    lua_pushstring(L, e->d_name);
    lua_rawseti(L, -2, ++n);
  }
  int rerr = errno;
  closedir(d);
  if (rerr) {
    errno = rerr;
    return fail_errno(L, "cannot read the folder", path);
  }
  /* sort through a C array of the table's own strings (they stay anchored in it) */
  const char **names = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n ? n : 1), 0); /* [names, box] */
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, -2, i);
    names[i - 1] = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  qsort(names, (size_t)n, sizeof *names, cmp_names);
  lua_createtable(L, (int)n, 0); /* [names, box, sorted] */
  for (lua_Integer i = 1; i <= n; i++) {
    lua_pushstring(L, names[i - 1]);
    lua_rawseti(L, -2, i);
  }
  return 1;
}

/* mkdir(path): every missing folder on the way, like mkdir -p; an existing folder is fine. */
static int l_mkdir(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  if (len == 0 || strlen(path) != len) return luaL_argerror(L, 1, "not a path");
  if (len >= PATH_MAX) return km_fail(L, "IO", "cannot create %s: the path is too long", path);
  mode_t last = (mode_t)luaL_optinteger(L, 2, 0777) & 07777;
  char buf[PATH_MAX];
  memcpy(buf, path, len + 1);
  for (size_t i = 1; i <= len; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, i == len ? last : 0777) != 0 && errno != EEXIST) return fail_errno(L, "cannot create", buf);
    buf[i] = c;
  }
  struct stat st;
  if (stat(path, &st) != 0) return fail_errno(L, "cannot create", path);
  if (!S_ISDIR(st.st_mode)) return km_fail(L, "NOT_DIR", "cannot create %s: it exists and is not a folder", path);
  lua_pushboolean(L, 1);
  return 1;
}

/* create(path [, text]): a file that did not exist (O_EXCL), holding text: of several
 * processes creating one path, exactly one gets true; the others get EXISTS. */
static int l_create(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t n = 0;
  const char *text = luaL_optlstring(L, 2, "", &n);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fail_errno(L, "cannot create", path);
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, text + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      errno = e;
      return fail_errno(L, "cannot write", path);
    }
    off += (size_t)w;
  }
  if (close(fd) != 0) return fail_errno(L, "cannot write", path);
  lua_pushboolean(L, 1);
  return 1;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)ftw;
  return (flag == FTW_DP ? rmdir(p) : unlink(p)) != 0 && errno != ENOENT ? -1 : 0;
}

/* rmtree(path): the folder and all under it (or the file); symlinks are removed, never
 * followed (FTW_PHYS). A path that is not there is already removed. */
static int l_rmtree(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  if (!path[0] || !strcmp(path, "/")) return luaL_argerror(L, 1, "refusing to remove this path");
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return lua_pushboolean(L, 1), 1;
    return fail_errno(L, "cannot remove", path);
  }
  if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0) return fail_errno(L, "cannot remove", path);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_realpath(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  char out[PATH_MAX];
  if (!realpath(p, out)) return km_fail(L, errcode(errno), "%s: %s", p, strerror(errno));
  lua_pushstring(L, out);
  return 1;
}

/* ==================================================================================== */
/* Terminal and machine                                                                  */
/* ==================================================================================== */

/* isatty(fd | file): a file handle of the io library, or a descriptor number. */
static int l_isatty(lua_State *L) {
  int fd;
  luaL_Stream *s = luaL_testudata(L, 1, LUA_FILEHANDLE);
  if (s) {
    luaL_argcheck(L, s->closef != NULL && s->f != NULL, 1, "a closed file");
    fd = fileno(s->f);
  } else {
    fd = (int)luaL_checkinteger(L, 1);
  }
  lua_pushboolean(L, fd >= 0 && isatty(fd));
  return 1;
}

/* cpu_count(): the CPUs the affinity mask allows (what nproc prints), else the online count. */
static int l_cpu_count(lua_State *L) {
  long n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
  lua_pushinteger(L, n < 1 ? 1 : n);
  return 1;
}

static int l_uid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)geteuid());
  return 1;
}

static int l_pid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

static int l_sleep(lua_State *L) {
  lua_Number s = luaL_checknumber(L, 1);
  luaL_argcheck(L, s >= 0 && s < 1e6, 1, "seconds out of range");
  struct timespec ts = {(time_t)s, (long)((s - (lua_Number)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return 0;
}

/* ==================================================================================== */
/* Child processes (km.proc is for children spoken to through pipes; these are not)     */
/* ==================================================================================== */

static const char *fd_mode(lua_State *L, const char *field) {
  const char *m = km_optfield_str(L, 2, field, "inherit");
  if (strcmp(m, "inherit") && strcmp(m, "null")) luaL_error(L, "spawn: %s must be \"inherit\" or \"null\"", field);
  return m;
}

/* spawn(argv [, opts]) -> pid. argv[1] is looked up on PATH. argv and envp live in userdata
 * boxes, so nothing leaks if a bad argument raises. */
static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  const char *outmode = fd_mode(L, "stdout"), *errmode = fd_mode(L, "stderr");
  const char *errfile = km_optfield_str(L, 2, "stderr_file", NULL);
  int session = 0;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "session");
    session = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  if (lua_istable(L, 2)) lua_getfield(L, 2, "env");
  else lua_pushnil(L);
  if (!lua_isnil(L, 3) && !lua_istable(L, 3)) luaL_error(L, "spawn: env must be a table");
  const char **argv, **envp;
  km_spawn_args(L, 1, 3, 0, &argv, &envp);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!strcmp(outmode, "null")) posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (errfile) posix_spawn_file_actions_addopen(&fa, 2, errfile, O_WRONLY | O_CREAT | O_APPEND, 0600);
  else if (!strcmp(errmode, "null")) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  km_spawnattr_init(&attr, session ? POSIX_SPAWN_SETSID : 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, (char *const *)argv, (char *const *)envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return km_fail(L, rc == ENOENT ? "NOT_FOUND" : "SPAWN", "cannot start %s: %s", argv[0], strerror(rc));
  lua_pushinteger(L, pid);
  return 1;
}

static pid_t check_pid(lua_State *L) {
  lua_Integer pid = luaL_checkinteger(L, 1);
  /* 0 and negative numbers name process groups (-1: every process): never meant here */
  luaL_argcheck(L, pid > 0 && pid <= INT_MAX, 1, "not a process id");
  return (pid_t)pid;
}

/* wait(pid [, block]): reaps a child of ours; false while it runs (block = false). */
static int l_wait(lua_State *L) {
  pid_t pid = check_pid(L);
  int block = lua_toboolean(L, 2), st;
  pid_t r;
  do r = waitpid(pid, &st, block ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r < 0) return km_fail(L, errcode(errno), "wait for process %d: %s", (int)pid, strerror(errno));
  if (r == 0) return lua_pushboolean(L, 0), 1;
  lua_pushboolean(L, 1);
  if (WIFSIGNALED(st)) {
    lua_pushliteral(L, "signal");
    lua_pushinteger(L, WTERMSIG(st));
  } else {
    lua_pushliteral(L, "exit");
    lua_pushinteger(L, WEXITSTATUS(st));
  }
  return 3;
}

static int l_kill(lua_State *L) {
  pid_t pid = check_pid(L);
  int sig;
  if (lua_isinteger(L, 2)) {
    sig = (int)lua_tointeger(L, 2);
    luaL_argcheck(L, sig == 0, 2, "a signal name (\"TERM\", \"KILL\", \"INT\") or 0");
  } else {
    static const char *const names[] = {"TERM", "KILL", "INT", NULL};
    static const int sigs[] = {SIGTERM, SIGKILL, SIGINT};
    sig = sigs[luaL_checkoption(L, 2, "TERM", names)];
  }
  if (kill(pid, sig) != 0) return km_fail(L, errcode(errno), "signal process %d: %s", (int)pid, strerror(errno));
  lua_pushboolean(L, 1);
  return 1;
}

/* Rejection sampling: draws at or above the largest multiple of n are drawn again, so every
 * value in [1, n] is equally likely. */
static int l_random(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 1 && n <= ((lua_Integer)1 << 62), 1, "between 1 and 2^62");
  uint64_t un = (uint64_t)n, lim = (UINT64_MAX / un) * un, x;
  do {
    if (km_random_bytes(&x, sizeof x) != 0) return luaL_error(L, "sys.random: getrandom: %s", strerror(errno));
  } while (x >= lim);
  lua_pushinteger(L, (lua_Integer)(x % un) + 1);
  return 1;
}

int luaopen_km_sys(lua_State *L) {
  static const luaL_Reg fns[] = {{"readdir", l_readdir}, {"mkdir", l_mkdir}, {"create", l_create},         {"rmtree", l_rmtree},
                                 {"realpath", l_realpath}, {"isatty", l_isatty},     {"cpu_count", l_cpu_count},
                                 {"sleep", l_sleep},     {"spawn", l_spawn},         {"wait", l_wait},
                                 {"kill", l_kill},       {"uid", l_uid},             {"pid", l_pid},
                                 {"random", l_random},
                                 {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
