/* km_proc.c — `require "km.proc"`: child processes spoken to through framed pipes.
 *
 *   local p = proc.spawn({ "build/kmrun", "lua/km/serve/worker.lua" }, { env = { KM_DEVICE = "1" } })
 *   p:send(bytes)                      -- one frame: 4-byte little-endian length + bytes
 *   local msg, why, code = p:recv(ms)  -- a frame, or nil, "timeout"/"closed", TIMEOUT/EOF
 *   p:kill(); p:wait(ms)               -- SIGKILL, then reap: { exited, code, signal }
 *   local ch = proc.stdio_channel()    -- in the child: frames over the original stdin and
 *                                      -- stdout; stdout itself then goes to stderr so a
 *                                      -- stray print() cannot corrupt the stream
 *   local ready = proc.select({ p1, p2 }, ms)  -- the first with a frame or EOF waiting
 *   local l = proc.listen(path)        -- a Unix socket for this user's processes (kmrun serve)
 *   local ch = l:accept(ms)            -- a channel to one client | nil, why, TIMEOUT/EPERM
 *   local ch = proc.connect(path)      -- a channel to a listener | nil, why, CODE
 *   proc.quick_exit(code)              -- ends this process now (stdio flushed, nothing else)
 *
 * Why frames and not lines: payloads (verdicts, logs) contain newlines and arbitrary bytes.
 * Ownership: a km.Proc owns its two pipe ends and its child; close/__gc kills and reaps. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_scrub_core.h"

#define KM_PROC_MT "km.Proc"
#define KM_LISTENER_MT "km.Listener"
#define MAX_FRAME (256u << 20)

extern char **environ;

typedef struct {
  pid_t pid;      /* 0 for a channel over our own stdio, -1 once reaped */
  int in, out;    /* we write to `in`, read from `out`; -1 when closed */
  int status;     /* wait status once reaped */
  int reaped;
} km_proc;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static km_proc *proc_check(lua_State *L, int idx) {
  return luaL_checkudata(L, idx, KM_PROC_MT);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static int reap(km_proc *p, int block) {
  if (p->pid <= 0 || p->reaped) return 1;
  int st;
  pid_t r = waitpid(p->pid, &st, block ? 0 : WNOHANG);
  if (r == p->pid) {
    p->status = st;
    p->reaped = 1;
    return 1;
  }
  return 0;
}

static int proc_release(lua_State *L) {
  km_proc *p = proc_check(L, 1);
  close_fd(&p->in);
  close_fd(&p->out);
  if (p->pid > 0 && !p->reaped) {
    kill(p->pid, SIGKILL);
    reap(p, 1);
  }
  return 0;
}

/* proc.spawn(argv, { env = { NAME = value }, stderr = "inherit" | "null", clean_env = bool })
 * The child inherits this process's environment with env's entries over it; with
 * clean_env, only PATH, HOME, TMPDIR, LANG, LC_*, LD_LIBRARY_PATH, CUDA_*, NVIDIA_* and KM_*
 * are inherited, and none whose name looks like a key (km_scrub_core.h) — env's entries
 * are still passed as given. GPU workers and compile processes start this way. */
static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  int argc = (int)lua_rawlen(L, 1);
  if (argc < 1) return luaL_argerror(L, 1, "argv must hold at least the program");
  const char *errmode = km_optfield_str(L, 2, "stderr", "inherit");
  int clean = km_optfield_bool(L, 2, "clean_env", 0);
  /* argv and envp live in userdata boxes: nothing to free if anything below raises */
  if (!lua_isnoneornil(L, 2)) lua_getfield(L, 2, "env"); /* a table, or ignored */
  else lua_pushnil(L);
  const char **argv, **envp;
  km_spawn_args(L, 1, 3, clean, &argv, &envp);

  km_proc *p = lua_newuserdatauv(L, sizeof *p, 0);
  p->pid = -1;
  p->in = p->out = -1;
  p->reaped = 1;
  p->status = 0;
  luaL_setmetatable(L, KM_PROC_MT);
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC)) return km_fail(L, "EPIPE", "pipe: %s", strerror(errno));
  if (pipe2(from_child, O_CLOEXEC)) {
    close(to_child[0]), close(to_child[1]);
    return km_fail(L, "EPIPE", "pipe: %s", strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  if (!strcmp(errmode, "null")) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  km_spawnattr_init(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0); /* its own group: a terminal's ^C reaches the driver only */
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, (char *const *)argv, (char *const *)envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(to_child[0]);
  close(from_child[1]);
  if (rc) {
    close(to_child[1]);
    close(from_child[0]);
    return km_fail(L, "ESPAWN", "cannot start %s: %s", argv[0], strerror(rc));
  }
  p->pid = pid;
  p->reaped = 0;
  p->in = to_child[1];
  p->out = from_child[0];
  signal(SIGPIPE, SIG_IGN); /* a dead child shows as EPIPE from send, not a signal */
  return 1;
}

/* proc.stdio_channel(): frames over this process's original stdin/stdout */
static int l_stdio_channel(lua_State *L) {
  km_proc *p = lua_newuserdatauv(L, sizeof *p, 0);
  p->pid = 0;
  p->reaped = 1;
  p->in = p->out = -1;
  luaL_setmetatable(L, KM_PROC_MT);
  fflush(stdout);
  int in = dup(0), out = dup(1);
  if (in < 0 || out < 0) return km_fail(L, "EIO", "dup: %s", strerror(errno));
  fcntl(in, F_SETFD, FD_CLOEXEC);
  fcntl(out, F_SETFD, FD_CLOEXEC);
  dup2(2, 1); /* print() now lands on stderr */
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0), close(devnull);
  p->in = out;
  p->out = in;
  signal(SIGPIPE, SIG_IGN);
  return 1;
}

static int write_all(int fd, const void *buf, size_t n) {
  const char *b = buf;
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

static int proc_send(lua_State *L) {
  km_proc *p = proc_check(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  if (p->in < 0) return km_fail(L, "EPIPE", "send: the channel is closed");
  if (n > MAX_FRAME) return luaL_error(L, "send: frame of %I bytes is over the limit", (lua_Integer)n);
  unsigned char hdr[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
  if (write_all(p->in, hdr, 4) || write_all(p->in, s, n))
    return km_fail(L, errno == EPIPE ? "EPIPE" : "EIO", "send: %s", strerror(errno));
  lua_pushboolean(L, 1);
  return 1;
}

/* Reads exactly n bytes before the deadline (ms, <0: none). 0 ok, 1 timeout, 2 EOF, 3 error */
static int read_full(int fd, char *buf, size_t n, double deadline) {
  while (n) {
    int wait = -1;
    if (deadline >= 0) {
      double left = deadline - now_ms();
      wait = left > 0 ? (int)left + 1 : 0; /* past the deadline: still take what is there */
    }
    struct pollfd pfd = {fd, POLLIN, 0};
    int r = poll(&pfd, 1, wait);
    if (r < 0) {
      if (errno == EINTR) continue;
      return 3;
    }
    if (r == 0) return 1;
    ssize_t got = read(fd, buf, n);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return 3;
    }
    if (got == 0) return 2;
    buf += got;
    n -= (size_t)got;
  }
  return 0;
}

/* p:recv([timeout_ms]) -> frame | nil, "timeout", "TIMEOUT" | nil, "closed", "EOF" */
static int proc_recv(lua_State *L) {
  km_proc *p = proc_check(L, 1);
  lua_Number timeout = luaL_optnumber(L, 2, -1);
  if (p->out < 0) return km_fail(L, "EOF", "closed");
  double deadline = timeout < 0 ? -1 : now_ms() + timeout;
  unsigned char hdr[4];
  int r = read_full(p->out, (char *)hdr, 4, deadline);
  if (r == 1) return km_fail(L, "TIMEOUT", "timeout");
  if (r == 2) return km_fail(L, "EOF", "closed");
  if (r == 3) return km_fail(L, "EIO", "recv: %s", strerror(errno));
  size_t n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
  if (n > MAX_FRAME) return km_fail(L, "EPROTO", "recv: frame of %I bytes is over the limit", (lua_Integer)n);
  luaL_Buffer b;
  char *buf = luaL_buffinitsize(L, &b, n);
  /* a frame that started arrives whole: give its body a generous deadline of its own */
  r = read_full(p->out, buf, n, timeout < 0 ? -1 : now_ms() + timeout + 10000);
  if (r) return km_fail(L, r == 1 ? "TIMEOUT" : "EOF", r == 1 ? "timeout inside a frame" : "closed inside a frame");
  luaL_pushresultsize(&b, n);
  return 1;
}

/* proc.select({ procs }, timeout_ms) -> the first proc with input (or EOF) ready, or nil */
static int l_select(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Number timeout = luaL_optnumber(L, 2, -1);
  int n = (int)lua_rawlen(L, 1);
  struct pollfd *pfd = lua_newuserdatauv(L, sizeof *pfd * (size_t)(n ? n : 1), 0);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 1, i + 1);
    km_proc *p = proc_check(L, -1);
    pfd[i].fd = p->out;
    pfd[i].events = POLLIN;
    pfd[i].revents = 0;
    lua_pop(L, 1);
  }
  int r;
  do r = poll(pfd, (nfds_t)n, timeout < 0 ? -1 : (int)timeout);
  while (r < 0 && errno == EINTR);
  for (int i = 0; i < n && r > 0; i++)
    if (pfd[i].revents) {
      lua_rawgeti(L, 1, i + 1);
      lua_pushinteger(L, i + 1);
      return 2;
    }
  lua_pushnil(L);
  return 1;
}

/* ==== Unix sockets: channels between this user's processes (kmrun serve and its clients) ==== */

/* A channel over a connected socket: frames both ways, no child (pid 0, as stdio_channel). */
static int push_socket_channel(lua_State *L, int fd) {
  km_proc *p = lua_newuserdatauv(L, sizeof *p, 0);
  p->pid = 0;
  p->reaped = 1;
  p->status = 0;
  p->out = fd;
  p->in = dup(fd);
  luaL_setmetatable(L, KM_PROC_MT);
  if (p->in < 0) return km_fail(L, "EIO", "dup: %s", strerror(errno));
  fcntl(p->in, F_SETFD, FD_CLOEXEC);
  signal(SIGPIPE, SIG_IGN); /* a client gone shows as EPIPE from send */
  return 1;
}

static int socket_address(lua_State *L, const char *path, struct sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a->sun_path)
    return km_fail(L, "ENAMETOOLONG", "socket path longer than %d bytes: %s", (int)sizeof a->sun_path - 1, path);
  strcpy(a->sun_path, path);
  return 0;
}

/* proc.listen(path) -> listener | nil, why, CODE. The socket file is made 0600: only this
 * user may connect, and accept() checks the peer's uid as well (a folder's mode can be wrong). */
static int l_listen(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct sockaddr_un a;
  if (socket_address(L, path, &a)) return 3;
  int *fd = lua_newuserdatauv(L, sizeof *fd, 0);
  *fd = -1;
  luaL_setmetatable(L, KM_LISTENER_MT);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return km_fail(L, "EIO", "socket: %s", strerror(errno));
  mode_t old = umask(0177);
  int r = bind(s, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (r || listen(s, 16)) {
    int e = errno;
    close(s);
    return km_fail(L, e == EADDRINUSE ? "EXISTS" : e == EACCES ? "ACCESS" : "EIO", "cannot listen on %s: %s", path, strerror(e));
  }
  *fd = s;
  return 1;
}

static int *listener_check(lua_State *L) { return luaL_checkudata(L, 1, KM_LISTENER_MT); }

/* l:accept([ms]) -> channel | nil, "timeout", "TIMEOUT" | nil, why, "EPERM" (another user) */
static int listener_accept(lua_State *L) {
  int *fd = listener_check(L);
  lua_Number timeout = luaL_optnumber(L, 2, -1);
  if (*fd < 0) return km_fail(L, "EOF", "the listener is closed");
  struct pollfd pfd = {*fd, POLLIN, 0};
  int r = poll(&pfd, 1, timeout < 0 ? -1 : (int)timeout);
  if (r < 0 && errno == EINTR) return km_fail(L, "TIMEOUT", "interrupted");
  if (r < 0) return km_fail(L, "EIO", "poll: %s", strerror(errno));
  if (r == 0) return km_fail(L, "TIMEOUT", "timeout");
  int c = accept4(*fd, NULL, NULL, SOCK_CLOEXEC);
  if (c < 0) return km_fail(L, errno == EINTR || errno == EAGAIN ? "TIMEOUT" : "EIO", "accept: %s", strerror(errno));
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) || cred.uid != geteuid()) {
    close(c);
    return km_fail(L, "EPERM", "refused a connection from uid %d", (int)cred.uid);
  }
  return push_socket_channel(L, c);
}

static int listener_close(lua_State *L) {
  int *fd = listener_check(L);
  if (*fd >= 0) close(*fd);
  *fd = -1;
  return 0;
}

/* proc.connect(path) -> channel | nil, why, "NOT_FOUND" | "REFUSED" (nobody listens) | "EPERM"
 * (another user listens) | CODE */
static int l_connect(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct sockaddr_un a;
  if (socket_address(L, path, &a)) return 3;
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return km_fail(L, "EIO", "socket: %s", strerror(errno));
  if (connect(s, (struct sockaddr *)&a, sizeof a)) {
    int e = errno;
    close(s);
    return km_fail(L, e == ENOENT ? "NOT_FOUND" : e == ECONNREFUSED ? "REFUSED" : e == EACCES ? "ACCESS" : "EIO",
                   "cannot connect to %s: %s", path, strerror(e));
  }
  /* the listener must be this user's too: another user's socket in a shared folder would
   * otherwise hand out verdicts of its own making */
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) || cred.uid != geteuid()) {
    close(s);
    return km_fail(L, "EPERM", "%s is another user's (uid %d): not connecting", path, (int)cred.uid);
  }
  return push_socket_channel(L, s);
}

static int proc_kill(lua_State *L) {
  km_proc *p = proc_check(L, 1);
  int sig = (int)luaL_optinteger(L, 2, SIGKILL);
  if (p->pid > 0 && !p->reaped) kill(p->pid, sig);
  lua_settop(L, 1);
  return 1;
}

static void push_status(lua_State *L, km_proc *p) {
  lua_createtable(L, 0, 3);
  lua_pushboolean(L, WIFEXITED(p->status));
  lua_setfield(L, -2, "exited");
  if (WIFEXITED(p->status)) {
    lua_pushinteger(L, WEXITSTATUS(p->status));
    lua_setfield(L, -2, "code");
  }
  if (WIFSIGNALED(p->status)) {
    lua_pushinteger(L, WTERMSIG(p->status));
    lua_setfield(L, -2, "signal");
  }
}

/* p:wait([timeout_ms]) -> { exited, code, signal } | nil, "timeout", "TIMEOUT" */
static int proc_wait(lua_State *L) {
  km_proc *p = proc_check(L, 1);
  lua_Number timeout = luaL_optnumber(L, 2, -1);
  if (p->pid == 0) return luaL_error(L, "wait: a stdio channel has no child");
  double deadline = now_ms() + timeout;
  while (!reap(p, timeout < 0)) {
    if (timeout >= 0 && now_ms() >= deadline) return km_fail(L, "TIMEOUT", "timeout");
    usleep(1000);
  }
  push_status(L, p);
  return 1;
}

static int proc_alive(lua_State *L) {
  km_proc *p = proc_check(L, 1);
  lua_pushboolean(L, p->pid > 0 && !reap(p, 0));
  return 1;
}

static int proc_pid(lua_State *L) {
  lua_pushinteger(L, proc_check(L, 1)->pid);
  return 1;
}

/* proc.quick_exit([code]): C stdio flushed, then _exit(code) — no Lua finalizers, no atexit
 * handlers, no C++ static destructors. For a GPU worker told to quit after its last verdict:
 * what a normal exit would run there is teardown the kernel and the driver do at process
 * exit anyway (torch's static destructors and caching allocator, the CUDA context, NVRTC),
 * and it takes a fresh `kmrun eval` ~0.4 s (bench/RESULTS.md, "quick-exit"). Not for a process
 * that still has files, stores or children to close. */
static int l_quick_exit(lua_State *L) {
  int code = (int)luaL_optinteger(L, 1, 0);
  fflush(NULL);
  _exit(code);
  return 0;
}

int luaopen_km_proc(lua_State *L) {
  static const luaL_Reg methods[] = {{"send", proc_send}, {"recv", proc_recv}, {"kill", proc_kill},
                                     {"wait", proc_wait}, {"alive", proc_alive}, {"pid", proc_pid},
                                     {"close", proc_release}, {NULL, NULL}};
  km_newclass(L, KM_PROC_MT, methods, proc_release);
  static const luaL_Reg lmethods[] = {{"accept", listener_accept}, {"close", listener_close}, {NULL, NULL}};
  km_newclass(L, KM_LISTENER_MT, lmethods, listener_close);
  static const luaL_Reg fns[] = {{"spawn", l_spawn},   {"stdio_channel", l_stdio_channel}, {"select", l_select},
                                 {"listen", l_listen}, {"connect", l_connect},             {"quick_exit", l_quick_exit},
                                 {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
