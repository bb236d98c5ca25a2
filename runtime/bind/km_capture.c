/* km_capture.c — `require "km.capture"`: catch what this process writes to its stdout.
 *
 *   local cap = capture.start { keep = 65536 }   -- fd 1 now feeds a pipe read by a thread
 *   ... judge a candidate: CUDA device printf, print(), children's output ...
 *   local text, lines, bytes = cap:stop(4096)    -- fd 1 restored; the first 4096 bytes,
 *                                                -- exact line and byte counts of it all
 *
 * Why: the CUDA driver writes a kernel's printf output to the C `stdout` at sync points,
 * and a kernel can print millions of lines. A pipe drained by a reader thread that keeps
 * only the first `keep` bytes and counts the rest costs bounded memory and no disk, however
 * much is printed (a temp file would grow without bound). The reader never blocks the
 * writer for long: it only counts.
 *
 * Lines are counted as newline bytes, plus one for a last line without a newline.
 * One capture at a time per process (fd 1 is process-wide); starting a second raises.
 * Ownership: a km.Capture owns the pipe, the saved fd 1 and the reader thread; stop,
 * __close and __gc restore fd 1 and join the thread (idempotent). Output a child process
 * still holding the pipe writes after stop is lost, never waited for. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"

#define KM_CAPTURE_MT "km.Capture"
#define DEFAULT_KEEP (64 * 1024)
#define DEFAULT_LIMIT 4096

typedef struct {
  int active;       /* fd 1 redirected, thread running */
  int saved;        /* the original fd 1, restored at stop */
  int rd, wr;       /* the pipe: fd 1 is a copy of wr while active */
  int wake[2];      /* written at stop: the reader drains what is left and ends */
  pthread_t th;
  uint64_t bytes, newlines;
  int last_nl;      /* the last byte seen was '\n' */
  size_t kept, keep;
  char buf[];       /* the first `keep` bytes */
} capture;

static int capture_active; /* one per process: fd 1 is shared */

static void consume(capture *c, const char *b, size_t n) {
  if (!n) return;
  if (c->kept < c->keep) {
    size_t k = c->keep - c->kept < n ? c->keep - c->kept : n;
    memcpy(c->buf + c->kept, b, k);
    c->kept += k;
  }
  for (const char *p = b, *e = b + n; (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++) c->newlines++;
  c->bytes += n;
  c->last_nl = b[n - 1] == '\n';
}

/* Reads until woken, then drains what the pipe holds without waiting for EOF (a child
 * that inherited fd 1 may hold the pipe open for ever). */
static void *reader(void *arg) {
  capture *c = arg;
  char b[65536];
  struct pollfd p[2] = {{c->rd, POLLIN, 0}, {c->wake[0], POLLIN, 0}};
  for (;;) {
    int r = poll(p, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (p[0].revents & (POLLIN | POLLHUP)) {
      ssize_t n = read(c->rd, b, sizeof b);
      if (n > 0) { consume(c, b, (size_t)n); continue; }
      if (n == 0) p[0].fd = -1; /* every writer closed: wait for the wake-up alone */
    }
    if (p[1].revents) break;
  }
  fcntl(c->rd, F_SETFL, fcntl(c->rd, F_GETFL) | O_NONBLOCK);
  for (;;) {
    ssize_t n = read(c->rd, b, sizeof b);
    if (n > 0) consume(c, b, (size_t)n);
    else if (n < 0 && errno == EINTR) continue;
    else break;
  }
  return NULL;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Restores fd 1 and joins the reader; safe to call twice and on a half-made capture. */
static void finish(capture *c) {
  if (c->active) {
    fflush(stdout);
    dup2(c->saved, 1);
    close_fd(&c->wr);
    ssize_t w;
    do w = write(c->wake[1], "x", 1); while (w < 0 && errno == EINTR);
    pthread_join(c->th, NULL);
    c->active = 0;
    capture_active = 0;
  }
  close_fd(&c->saved);
  close_fd(&c->rd);
  close_fd(&c->wr);
  close_fd(&c->wake[0]);
  close_fd(&c->wake[1]);
}

static int capture_gc(lua_State *L) {
  finish(luaL_checkudata(L, 1, KM_CAPTURE_MT));
  return 0;
}

/* capture.start([{ keep = bytes }]) -> a km.Capture, or nil, msg, code */
static int l_start(lua_State *L) {
  lua_Integer keep = km_optfield_int(L, 1, "keep", DEFAULT_KEEP);
  luaL_argcheck(L, keep >= 0 && keep <= (1 << 26), 1, "keep must be 0 .. 64 MiB");
  if (capture_active) return luaL_error(L, "capture.start: a capture is already running in this process");
  /* created closed, then acquired: a failure in between leaves nothing open */
  capture *c = lua_newuserdatauv(L, sizeof *c + (size_t)keep, 0);
  memset(c, 0, sizeof *c);
  c->saved = c->rd = c->wr = c->wake[0] = c->wake[1] = -1;
  c->keep = (size_t)keep;
  luaL_setmetatable(L, KM_CAPTURE_MT);
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return km_fail(L, "EIO", "capture: pipe: %s", strerror(errno));
  c->rd = p[0], c->wr = p[1];
  if (pipe2(c->wake, O_CLOEXEC) < 0) { finish(c); return km_fail(L, "EIO", "capture: pipe: %s", strerror(errno)); }
  fflush(stdout); /* what was written before the capture goes where it was going */
  if ((c->saved = fcntl(1, F_DUPFD_CLOEXEC, 3)) < 0) {
    finish(c);
    return km_fail(L, "EIO", "capture: cannot save fd 1: %s", strerror(errno));
  }
  int err = pthread_create(&c->th, NULL, reader, c);
  if (err) { finish(c); return km_fail(L, "EIO", "capture: thread: %s", strerror(err)); }
  if (dup2(c->wr, 1) < 0) { /* children inherit fd 1: their output is caught too */
    err = errno;
    c->active = 1, capture_active = 1;
    finish(c);
    return km_fail(L, "EIO", "capture: dup2: %s", strerror(err));
  }
  c->active = 1;
  capture_active = 1;
  return 1;
}

/* cap:stop([limit = 4096]) -> text (the first min(limit, keep) bytes), lines, bytes */
static int l_stop(lua_State *L) {
  capture *c = luaL_checkudata(L, 1, KM_CAPTURE_MT);
  lua_Integer limit = luaL_optinteger(L, 2, DEFAULT_LIMIT);
  luaL_argcheck(L, limit >= 0, 2, "limit must be >= 0");
  if (!c->active) return luaL_error(L, "attempt to use a stopped km.Capture");
  finish(c);
  size_t n = (size_t)limit < c->kept ? (size_t)limit : c->kept;
  lua_pushlstring(L, c->buf, n);
  lua_pushinteger(L, (lua_Integer)(c->newlines + (c->bytes && !c->last_nl)));
  lua_pushinteger(L, (lua_Integer)c->bytes);
  return 3;
}

/* capture.active() -> whether this process's stdout is being captured now */
static int l_active(lua_State *L) {
  lua_pushboolean(L, capture_active);
  return 1;
}

int luaopen_km_capture(lua_State *L) {
  static const luaL_Reg methods[] = {{"stop", l_stop}, {NULL, NULL}};
  km_newclass(L, KM_CAPTURE_MT, methods, capture_gc);
  static const luaL_Reg fns[] = {{"start", l_start}, {"active", l_active}, {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
