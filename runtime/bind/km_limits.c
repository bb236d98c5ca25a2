/* km_limits.c — `require "km.limits"`: the walls around Lua that a model or a task wrote.
 *
 *   limits.run(fn, budget, memory, seconds, block, ...) -> true, results... | false, message, CODE
 *       Calls fn(...) in a fresh coroutine under its budgets and returns what it returned.
 *       budget: work units (one per VM instruction, plus what bounded library calls and
 *       allocations are charged); memory: bytes the call may allocate beyond what the
 *       state holds when it starts (nil or < 0: no cap); seconds: a wall-clock deadline
 *       (nil or <= 0: none); block: the largest single object (string, table part, stack)
 *       it may make, in bytes (nil or 0: any). CODE is "BUDGET", "TIME", "MEMORY",
 *       "ERROR" (message is the error value as raised) or "YIELD".
 *   limits.lib()    -> { string, table, utf8, tonumber, pcall, xpcall }: fresh tables of
 *                      bounded functions for a sandbox environment (below)
 *   limits.memory() -> bytes of Lua memory in use (as this module counts them), cap or nil
 *   limits.realpath(path) -> absolute path | nil, message, "NOT_FOUND"
 *   limits.resolve_inside(dir, name) -> absolute path, kind ("file"|"directory"|"other"), size
 *       | nil, why, CODE ("BAD_NAME", "ABSOLUTE", "DOTDOT", "NOT_FOUND", "OUTSIDE"):
 *       `name` must be relative, have no `..` component, and resolve (symlinks followed)
 *       inside `dir`.
 *
 * Memory. The first require wraps the state's allocator (lua_getallocf/lua_setallocf, so
 * any host gets it) with a counting one; blocks carry no header, so the wrapped allocator
 * can be put back at any time (a finalizer does at lua_close). A cap refuses growth only:
 * a free or a shrink is never refused, so Lua sees an ordinary LUA_ERRMEM and nothing is
 * left half-built (Lua's own code handles a failed allocation everywhere). After 16
 * refusals in one run (each one a full emergency collection) every growth is refused.
 *
 * Budget. A count hook on the coroutine adds its step to the meter; a bounded library
 * function charges the work it is about to do (or does, step by step: pattern matching)
 * before doing it; every allocation made while a run is active charges 1 unit per 64
 * bytes. When the meter passes the budget the run "trips": the hook re-arms itself on
 * every instruction and the sandbox's pcall/xpcall re-raise, so nothing inside can catch
 * it. xpcall never runs its handler inside Lua's error machinery (where hooks are off,
 * so a looping handler would never be stopped): the handler is called after the
 * protected call has returned, like any other function.
 *
 * Time. Some single VM instructions cost as much as their operands are long (== and <
 * on long strings, string-to-number coercion, hashing a new long string), which no
 * instruction count sees: the block cap keeps each such operand (so each such
 * instruction) small, and a
 * per-thread POSIX timer (SIGEV_THREAD_ID, signal KM_LIMITS_SIGNAL) fires at the deadline
 * and, in the signal handler, sets the hook on every instruction (what lua.c does for
 * Ctrl-C); it repeats every millisecond until the run notices. Bounded library functions
 * that work step by step also stop at the deadline.
 *
 * The bounded library has no patterns: string.find finds plain text only (`plain` must be
 * true), and string.match/gmatch/gsub and utf8.codes are not offered (a call says so): a
 * backtracking matcher needs a step meter inside it, and the tree holds only code written
 * here. The other functions that loop or copy (string.byte, char,
 * format, lower, upper, rep, reverse, sub; table.concat, insert, move, pack, remove, sort,
 * unpack; utf8.char, codepoint, len, offset; tonumber) charge their work from their
 * arguments and then call Lua's own function. string.pack/packsize/unpack and dump are
 * left out. During a run the string metatable's __index is this bounded string table, so
 * ("x"):rep(n) is bounded too.
 *
 * Ownership: the allocator wrapper (a malloc'd struct) belongs to the state and is freed
 * by the registry sentinel's finalizer; runs live on the C stack of limits.run. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "km.h"

#ifndef KM_LIMITS_SIGNAL
#define KM_LIMITS_SIGNAL (SIGRTMAX - 6)
#endif

#define ALLOC_BYTES_PER_UNIT 64  /* an allocation of 64 bytes costs one unit */
#define COPY_BYTES_PER_UNIT 8    /* copying or scanning 8 bytes costs one unit */
#define HOOK_STEP 1000           /* instructions between count hooks */

/* ==================================================================================== */
/* Memory: a counting allocator                                                          */
/* ==================================================================================== */

typedef struct {
  lua_Alloc f;    /* the allocator we wrap */
  void *ud;
  size_t used;    /* bytes in live blocks */
  size_t cap;     /* 0: none */
  size_t block;   /* the largest single block a request may grow to; 0: any */
  size_t refused; /* the size of the last refused request */
  int refusals;   /* in this run; past MAX_REFUSALS every growth is refused */
} memcap;

/* Each refusal makes Lua run a full emergency collection and try again; a call that
 * keeps hitting its cap would crawl through one collection per allocation. */
#define MAX_REFUSALS 16

typedef struct run_s run_t;
static __thread run_t *current; /* the innermost run on this thread */

struct run_s {
  lua_State *co;
  lua_Integer budget;
  lua_Integer used;
  int step;
  int why;                    /* 0 running, else a WHY_* */
  volatile sig_atomic_t fired; /* the deadline passed (set by the signal handler) */
  int has_deadline;
  struct timespec deadline;   /* absolute, CLOCK_MONOTONIC: min(own, the outer run's) */
  run_t *prev;
};

enum { WHY_NONE, WHY_BUDGET, WHY_TIME, WHY_MEMORY, WHY_COUNT };
static const char *const why_code[WHY_COUNT] = {"ERROR", "BUDGET", "TIME", "MEMORY"};
static const char *const why_raise[WHY_COUNT] = {"", "instruction budget exceeded",
                                                 "time budget exceeded", "memory budget exceeded"};
static char why_keys[WHY_COUNT]; /* registry keys of the preallocated messages */
static char strlib_key, sentinel_key;

static void *memcap_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  memcap *m = ud;
  size_t old = ptr ? osize : 0;
  if (nsize > old && (m->cap || m->block)) {
    size_t grow = nsize - old;
    if ((m->cap && (m->used + grow < m->used || m->used + grow > m->cap || m->refusals >= MAX_REFUSALS)) ||
        (m->block && nsize > m->block)) {
      m->refused = nsize;
      m->refusals++;
      return NULL; /* growth over the cap: Lua raises LUA_ERRMEM */
    }
  }
  void *p = m->f(m->ud, ptr, osize, nsize);
  if (nsize == 0) { /* a free never fails */
    m->used = m->used > old ? m->used - old : 0;
    return p;
  }
  if (p) {
    m->used = m->used - (m->used > old ? old : m->used) + nsize;
    run_t *r = current;
    if (r && nsize > old) r->used += (lua_Integer)((nsize - old) / ALLOC_BYTES_PER_UNIT);
  }
  return p;
}

/* At lua_close: give the state its own allocator back and free the wrapper. */
static int memcap_release(lua_State *L) {
  void *ud;
  memcap **box = lua_touserdata(L, 1);
  if (box && *box && lua_getallocf(L, &ud) == memcap_alloc && ud == *box) {
    lua_setallocf(L, (*box)->f, (*box)->ud);
    free(*box);
  }
  if (box) *box = NULL;
  return 0;
}

static memcap *memcap_get(lua_State *L) {
  void *ud;
  lua_Alloc f = lua_getallocf(L, &ud);
  if (f == memcap_alloc) return ud;
  memcap **box = lua_newuserdatauv(L, sizeof *box, 0); /* [box] */
  *box = NULL;
  lua_newtable(L);                                     /* [box, mt] */
  lua_pushcfunction(L, memcap_release);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  memcap *m = malloc(sizeof *m);
  if (!m) luaL_error(L, "km.limits: out of memory");
  m->f = f;
  m->ud = ud;
  m->cap = 0;
  m->block = 0;
  m->refused = 0;
  m->refusals = 0;
  m->used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
  *box = m;
  lua_rawsetp(L, LUA_REGISTRYINDEX, &sentinel_key);    /* [] */
  lua_setallocf(L, memcap_alloc, m);
  return m;
}

static int l_memory(lua_State *L) {
  memcap *m = memcap_get(L);
  lua_pushinteger(L, (lua_Integer)m->used);
  if (m->cap) lua_pushinteger(L, (lua_Integer)m->cap);
  else lua_pushnil(L);
  return 2;
}

/* ==================================================================================== */
/* Runs: the meter, the count hook, the deadline                                         */
/* ==================================================================================== */

static int raise_trip(lua_State *L, run_t *r) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &why_keys[r->why]); /* preallocated: no allocation */
  return lua_error(L);
}

static void count_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  run_t *r = current;
  if (!r || r->co != L) return;
  if (!r->why) {
    if (r->fired) r->why = WHY_TIME;
    else if ((r->used += r->step) >= r->budget) r->why = WHY_BUDGET;
  }
  if (r->why) {
    lua_sethook(L, count_hook, LUA_MASKCOUNT, 1); /* and on every instruction after */
    raise_trip(L, r);
  }
}

/* Charges `units` of work to the current run; raises when it trips. Outside a run: free. */
static void charge(lua_State *L, lua_Integer units) {
  run_t *r = current;
  if (!r) return;
  if (units < 0 || r->used > LUA_MAXINTEGER - units) r->used = LUA_MAXINTEGER;
  else r->used += units;
  if (!r->why) {
    if (r->fired) r->why = WHY_TIME;
    else if (r->used >= r->budget) r->why = WHY_BUDGET;
  }
  if (r->why) raise_trip(L, r);
}

/* After a protected call inside a run: a trip (or a memory error) goes on up. */
static void rethrow_trip(lua_State *L, int status) {
  run_t *r = current;
  if (!r || status == LUA_OK) return;
  if (status == LUA_ERRMEM && !r->why) r->why = WHY_MEMORY;
  if (r->why) lua_error(L);
}

static int ts_ge(struct timespec a, struct timespec b) {
  return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec >= b.tv_nsec);
}

/* The deadline timer: one one-shot POSIX timer per thread, delivering KM_LIMITS_SIGNAL to
 * that thread. It is armed lazily and never disarmed: a run arms it only when nothing is
 * pending or what is pending is later than its deadline; when it fires, the handler
 * re-arms it for the current run's deadline, trips a run whose deadline has passed (and
 * fires again every ms until the run notices), or lets it lapse when no run is active.
 * So back-to-back short calls make no system call, and a busy thread sees one stray
 * signal per deadline period. Made on first use; a forked child (which inherits no
 * timers) makes its own; deleted when the thread exits. */
static pthread_once_t signal_once = PTHREAD_ONCE_INIT;
static pthread_key_t timer_key;
static int signal_ok;
static __thread timer_t tls_timer;
static __thread int tls_timer_ok;
static __thread volatile long long tls_armed; /* ns (CLOCK_MONOTONIC) of the pending expiry; 0: none */

static long long ts_ns(struct timespec t) { return (long long)t.tv_sec * 1000000000LL + t.tv_nsec; }

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return ts_ns(t);
}

static void timer_set(long long at) { /* async-signal-safe */
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  its.it_value.tv_sec = (time_t)(at / 1000000000LL);
  its.it_value.tv_nsec = (long)(at % 1000000000LL);
  tls_armed = at;
  if (timer_settime(tls_timer, TIMER_ABSTIME, &its, NULL) != 0) tls_armed = 0;
}

static void deadline_signal(int sig) {
  (void)sig;
  int saved = errno;
  tls_armed = 0;
  run_t *r = current;
  if (tls_timer_ok && r && r->has_deadline && r->why != WHY_TIME) {
    long long now = now_ns(), at = ts_ns(r->deadline);
    if (now >= at) {
      r->fired = 1;
      lua_sethook(r->co, count_hook, LUA_MASKCOUNT, 1);
      timer_set(now + 1000000); /* again in a ms, until the hook has seen it */
    } else timer_set(at);
  }
  errno = saved;
}

static void timer_gone(void *p) {
  (void)p;
  if (tls_timer_ok) timer_delete(tls_timer);
  tls_timer_ok = 0;
}

static void forked_child(void) { tls_timer_ok = 0; tls_armed = 0; }

static void signal_setup(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = deadline_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  signal_ok = sigaction(KM_LIMITS_SIGNAL, &sa, NULL) == 0 && pthread_key_create(&timer_key, timer_gone) == 0 &&
              pthread_atfork(NULL, NULL, forked_child) == 0;
}

/* Makes sure the thread's timer fires no later than r's deadline. */
static void arm(run_t *r) {
  if (!r || !r->has_deadline) return;
  long long at = ts_ns(r->deadline), pending = tls_armed;
  if (pending && pending <= at) return; /* the handler will carry it on to `at` */
  if (!tls_timer_ok) {
    pthread_once(&signal_once, signal_setup);
    if (!signal_ok) return;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = KM_LIMITS_SIGNAL;
    sev._sigev_un._tid = gettid();
    if (timer_create(CLOCK_MONOTONIC, &sev, &tls_timer) != 0) return;
    tls_timer_ok = 1;
    pthread_setspecific(timer_key, &tls_timer_ok);
  }
  timer_set(at);
}

static int string_mt(lua_State *L) {
  lua_pushliteral(L, "");
  int has = lua_getmetatable(L, -1);
  lua_remove(L, has ? -2 : -1);
  return has;
}

/* Everything l_run allocates, before anything changes: the thread holding fn and its
 * arguments, and the bounded string index ready to swap in.
 * [fn, b, m, s, blk, args...] -> [co], or [co, smt, old, "__index", bounded] where strings
 * have a metatable (*has_mt). */
static lua_State *run_prepare(lua_State *L, int nargs, int *has_mt) {
  lua_State *co = lua_newthread(L);                 /* [fn, b, m, s, args..., co] */
  lua_insert(L, 1);                                 /* [co, fn, b, m, s, args...] */
  lua_pushvalue(L, 2);
  lua_xmove(L, co, 1);
  if (nargs > 0) {
    luaL_checkstack(co, nargs, "too many arguments");
    lua_xmove(L, co, nargs);                        /* [co, fn, b, m, s, blk] */
  }
  lua_settop(L, 1);                                 /* [co] */
  *has_mt = string_mt(L);                           /* [co, smt?] */
  if (*has_mt) {
    lua_pushliteral(L, "__index");
    lua_rawget(L, -2);                              /* [co, smt, old] */
    lua_pushliteral(L, "__index");
    lua_rawgetp(L, LUA_REGISTRYINDEX, &strlib_key); /* [co, smt, old, "__index", bounded] */
  }
  return co;
}

/* The run's deadline: `seconds` from now (none where 0), never later than the outer run's. */
static void run_set_deadline(run_t *r, lua_Number seconds) {
  if (seconds > 0) {
    clock_gettime(CLOCK_MONOTONIC, &r->deadline);
    double whole = seconds > 1e9 ? 1e9 : seconds;
    time_t s = (time_t)whole;
    long ns = (long)((whole - (double)s) * 1e9);
    r->deadline.tv_sec += s;
    r->deadline.tv_nsec += ns;
    if (r->deadline.tv_nsec >= 1000000000L) { r->deadline.tv_sec++; r->deadline.tv_nsec -= 1000000000L; }
    r->has_deadline = 1;
  }
  if (r->prev && r->prev->has_deadline && (!r->has_deadline || ts_ge(r->deadline, r->prev->deadline))) {
    r->deadline = r->prev->deadline;
    r->has_deadline = 1;
  }
}

/* The allocator's limits around one run: the outer ones, put back when it ends, and the
 * run's own. */
typedef struct {
  size_t cap, block; /* the outer run's (0: none) */
  int refusals;      /* the outer run's count so far */
  size_t allowed;    /* bytes this run may allocate */
  size_t run_block;  /* this run's largest block (0: any), read when it ends */
} mem_limits;

/* Narrows the allocator's limits for a run: `memory` bytes more than in use now (< 0: the
 * outer cap), blocks of `block` bytes at most (<= 0: the outer limit); never wider than the
 * outer run's. */
static void memcap_enter(memcap *m, lua_Integer memory, lua_Integer block, mem_limits *ml) {
  ml->cap = m->cap;
  if (memory >= 0) {
    size_t cap = m->used + (size_t)memory < m->used ? SIZE_MAX : m->used + (size_t)memory;
    if (ml->cap && ml->cap < cap) cap = ml->cap;
    m->cap = cap ? cap : 1;
  }
  ml->allowed = m->cap > m->used ? m->cap - m->used : 0;
  ml->block = m->block;
  if (block > 0 && (!ml->block || (size_t)block < ml->block)) m->block = (size_t)block;
  ml->refusals = m->refusals;
  m->refused = 0;
  m->refusals = 0;
}

static void memcap_leave(memcap *m, mem_limits *ml) {
  m->cap = ml->cap;
  ml->run_block = m->block;
  m->block = ml->block;
  m->refusals = ml->refusals;
}

/* [.., false, message, code] for a run its budget, deadline or memory cap stopped. */
static int push_stopped(lua_State *L, const run_t *r, const memcap *m, const mem_limits *ml,
                        lua_Number seconds, lua_Integer memory) {
  lua_pushboolean(L, 0);
  switch (r->why) {
  case WHY_BUDGET:
    lua_pushfstring(L, "instruction budget exceeded (%I units)", (LUAI_UACINT)r->budget);
    break;
  case WHY_TIME:
    lua_pushfstring(L, "time budget exceeded (%f s)", (LUAI_UACNUMBER)seconds);
    break;
  default: {
    char buf[160];
    if (ml->run_block && m->refused > ml->run_block)
      snprintf(buf, sizeof buf, "memory budget exceeded (a single object of %.1f MiB; the limit is %.1f MiB)",
               m->refused / 1048576.0, ml->run_block / 1048576.0);
    else if (memory >= 0)
      snprintf(buf, sizeof buf, "memory budget exceeded (%.1f MiB allowed; a request for %.1f MiB was refused)",
               ml->allowed / 1048576.0, m->refused / 1048576.0);
    else
      snprintf(buf, sizeof buf, "memory budget exceeded (not enough memory)");
    lua_pushstring(L, buf);
  }
  }
  lua_pushstring(L, why_code[r->why]);
  return 3;
}

/* [.., true, results...] for a run that returned, else [.., false, message, code]. */
static int push_ended(lua_State *L, lua_State *co, int status, int nres) {
  if (status == LUA_OK) {
    luaL_checkstack(L, nres + 1, "too many results");
    lua_pushboolean(L, 1);
    lua_xmove(co, L, nres);
    return nres + 1;
  }
  lua_pushboolean(L, 0);
  if (status == LUA_YIELD) {
    lua_pushliteral(L, "the code yielded");
    lua_pushliteral(L, "YIELD");
  } else {
    lua_xmove(co, L, 1);
    lua_pushliteral(L, "ERROR");
  }
  return 3;
}

/* limits.run(fn, budget, memory, seconds, block, ...) */
static int l_run(lua_State *L) {
  luaL_checkany(L, 1);
  lua_Integer budget = luaL_checkinteger(L, 2);
  lua_Integer memory = luaL_optinteger(L, 3, -1);
  lua_Number seconds = luaL_optnumber(L, 4, 0);
  lua_Integer block = luaL_optinteger(L, 5, 0);
  if (lua_gettop(L) < 5) lua_settop(L, 5);
  int nargs = lua_gettop(L) - 5;
  memcap *m = memcap_get(L);
  int has_mt;
  lua_State *co = run_prepare(L, nargs, &has_mt);
  luaL_checkstack(L, LUA_MINSTACK, "too many results");

  run_t r;
  memset(&r, 0, sizeof r);
  r.co = co;
  r.budget = budget > 0 ? budget : 1;
  r.step = r.budget < HOOK_STEP ? (int)r.budget : HOOK_STEP;
  r.prev = current;
  run_set_deadline(&r, seconds);
  mem_limits ml;
  memcap_enter(m, memory, block, &ml);

  /* the run */
  if (has_mt) lua_rawset(L, -4);                    /* [co, smt, old] */
  lua_sethook(co, count_hook, LUA_MASKCOUNT, r.step);
  current = &r; /* before arming: a signal from here on sees this run */
  arm(&r);
  int nres = 0;
  int status = lua_resume(co, L, nargs, &nres);
  current = r.prev;
  arm(r.prev);
  lua_sethook(co, NULL, 0, 0);
  memcap_leave(m, &ml);
  if (has_mt) {
    lua_pushliteral(L, "__index");
    lua_insert(L, -2);
    lua_rawset(L, -3);                              /* [co, smt] */
  }
  /* the outer run pays for the inner one */
  if (r.prev) {
    r.prev->used = r.prev->used > LUA_MAXINTEGER - r.used ? LUA_MAXINTEGER : r.prev->used + r.used;
  }

  if (status == LUA_ERRMEM && !r.why) r.why = WHY_MEMORY;
  if (r.why) return push_stopped(L, &r, m, &ml, seconds, memory);
  return push_ended(L, co, status, nres);
}

/* ==================================================================================== */
/* The bounded library                                                                   */
/* ==================================================================================== */

/* Lua's own functions, called after the cost is charged (same for every state). */
static lua_CFunction o_byte, o_char, o_format, o_lower, o_upper, o_rep, o_reverse, o_sub, o_len;
static lua_CFunction o_concat, o_insert, o_move, o_pack, o_remove, o_sort, o_unpack;
static lua_CFunction o_uchar, o_codepoint, o_ulen, o_offset, o_tonumber;

#define MAXSIZE (sizeof(size_t) < sizeof(int) ? (size_t)~(size_t)0 : (size_t)INT_MAX)
#define BYTES(n) ((lua_Integer)((n) / COPY_BYTES_PER_UNIT) + 1)

/* lstrlib's position helpers */
static size_t posrelatI(lua_Integer pos, size_t len) {
  if (pos > 0) return (size_t)pos;
  else if (pos == 0) return 1;
  else if (pos < -(lua_Integer)len) return 1;
  else return len + (size_t)pos + 1;
}

static size_t getendpos(lua_State *L, int arg, lua_Integer def, size_t len) {
  lua_Integer pos = luaL_optinteger(L, arg, def);
  if (pos > (lua_Integer)len) return len;
  else if (pos >= 0) return (size_t)pos;
  else if (pos < -(lua_Integer)len) return 0;
  else return len + (size_t)pos + 1;
}

static int s_byte(lua_State *L) {
  size_t l;
  luaL_checklstring(L, 1, &l);
  lua_Integer pi = luaL_optinteger(L, 2, 1);
  size_t posi = posrelatI(pi, l), pose = getendpos(L, 3, pi, l);
  if (posi <= pose && pose - posi < 1000000) charge(L, (lua_Integer)(pose - posi) + 1);
  return o_byte(L);
}

static int s_char(lua_State *L) {
  charge(L, lua_gettop(L) + 1);
  return o_char(L);
}

/* string.format without host addresses: %p is refused, and a table, function, thread or
 * userdata given to %s is passed as its type's name (Lua's own %s would print
 * "table: 0x..."), so launch code learns no address of this process (docs/security.md).
 * Every other conversion sees its argument as given (its own error names the type). */
static int s_format(lua_State *L) {
  int n = lua_gettop(L);
  size_t fl;
  const char *f = luaL_checklstring(L, 1, &fl);
  int arg = 1;
  for (size_t i = 0; i + 1 < fl; i++) {
    if (f[i] != '%') continue;
    size_t j = i + 1;
    if (f[j] == '%') { i = j; continue; }
    while (j < fl && strchr("-+ #0123456789.", f[j])) j++;
    if (j < fl && f[j] == 'p') return luaL_error(L, "string.format: %%p is not offered in the sandbox");
    if (++arg <= n && j < fl && f[j] == 's') {
      int tp = lua_type(L, arg);
      if (tp != LUA_TSTRING && tp != LUA_TNUMBER && tp != LUA_TBOOLEAN && tp != LUA_TNIL) {
        lua_pushstring(L, lua_typename(L, tp));
        lua_replace(L, arg);
      }
    }
    i = j;
  }
  lua_Integer bytes = 0;
  for (int i = 1; i <= n; i++)
    if (lua_type(L, i) == LUA_TSTRING) bytes += (lua_Integer)lua_rawlen(L, i);
  charge(L, n + BYTES(bytes));
  return o_format(L);
}

static int s_bytes_of_arg1(lua_State *L, lua_CFunction f) {
  size_t l;
  luaL_checklstring(L, 1, &l);
  charge(L, BYTES(l));
  return f(L);
}
static int s_lower(lua_State *L) { return s_bytes_of_arg1(L, o_lower); }
static int s_upper(lua_State *L) { return s_bytes_of_arg1(L, o_upper); }
static int s_reverse(lua_State *L) { return s_bytes_of_arg1(L, o_reverse); }

static int s_sub(lua_State *L) {
  size_t l;
  luaL_checklstring(L, 1, &l);
  size_t start = posrelatI(luaL_checkinteger(L, 2), l);
  size_t end = getendpos(L, 3, -1, l);
  if (start <= end) charge(L, BYTES(end - start + 1));
  return o_sub(L);
}

static int s_rep(lua_State *L) {
  size_t l, lsep;
  luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &lsep);
  if (n > 0 && l + lsep >= l && (l + lsep == 0 || l + lsep <= MAXSIZE / (size_t)n)) {
    /* n copies (even of nothing: the loop runs n times) and the bytes they make */
    lua_Integer bytes = (lua_Integer)((size_t)n * l + (size_t)(n - 1) * lsep);
    charge(L, n / 4 + BYTES(bytes));
  }
  return o_rep(L);
}

/* ---- table ---- */

#define TAB_R 1
#define TAB_W 2
#define TAB_L 4

/* ltablib's checktab, answering instead of raising: can `arg` act as a table? */
static int tablike(lua_State *L, int arg, int what) {
  if (lua_type(L, arg) == LUA_TTABLE) return 1;
  int ok = 0;
  if (lua_getmetatable(L, arg)) {
    ok = 1;
    static const char *const need[3] = {"__index", "__newindex", "__len"};
    for (int i = 0; i < 3; i++) {
      if (!(what & (1 << i))) continue;
      lua_pushstring(L, need[i]);
      ok = ok && lua_rawget(L, -2) != LUA_TNIL;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  return ok;
}

/* #t when t acts as a table (else 0: Lua's function will raise its own error) */
static lua_Integer len_of(lua_State *L, int arg, int what) {
  if (!tablike(L, arg, what | TAB_L)) return 0;
  return luaL_len(L, arg);
}

static lua_Integer span(lua_Integer first, lua_Integer last) {
  if (last < first) return 0;
  lua_Unsigned n = (lua_Unsigned)last - (lua_Unsigned)first + 1u;
  return n > (lua_Unsigned)LUA_MAXINTEGER || n == 0 ? LUA_MAXINTEGER : (lua_Integer)n;
}

/* n elements and the call itself, saturating: span() may already be LUA_MAXINTEGER */
static lua_Integer and_call(lua_Integer n) { return n < LUA_MAXINTEGER ? n + 1 : LUA_MAXINTEGER; }

static int t_insert(lua_State *L) {
  if (lua_gettop(L) == 3) {
    lua_Integer e = len_of(L, 1, TAB_R | TAB_W);
    charge(L, and_call(span(luaL_checkinteger(L, 2), e)));
  }
  return o_insert(L);
}

static int t_remove(lua_State *L) {
  lua_Integer size = len_of(L, 1, TAB_R | TAB_W);
  lua_Integer pos = luaL_optinteger(L, 2, size);
  charge(L, and_call(span(pos, size)));
  return o_remove(L);
}

static int t_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
  charge(L, and_call(span(f, e)));
  return o_move(L);
}

static int t_concat(lua_State *L) {
  if (!tablike(L, 1, TAB_R | TAB_L)) return o_concat(L);
  lua_Integer last = luaL_len(L, 1);
  size_t lsep;
  luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, 3, 1);
  last = luaL_optinteger(L, 4, last);
  lua_Integer n = span(i, last);
  charge(L, and_call(n));
  /* the bytes it will copy: every element's length and the separators (saturating) */
  lua_Unsigned bytes = 0;
  const lua_Unsigned most = (lua_Unsigned)LUA_MAXINTEGER / 4;
  for (lua_Integer k = 0; k < n && bytes < most; k++) {
    int t = lua_geti(L, 1, i + k);
    if (t == LUA_TSTRING) bytes += lua_rawlen(L, -1);
    else if (t == LUA_TNUMBER) bytes += 44;
    lua_pop(L, 1);
    if (t != LUA_TSTRING && t != LUA_TNUMBER) break; /* Lua's concat will raise here */
  }
  if (n > 1 && lsep) {
    lua_Unsigned k = (lua_Unsigned)(n - 1);
    bytes += k > most / lsep ? most : k * lsep;
  }
  if (bytes > most) bytes = most;
  charge(L, BYTES((lua_Integer)bytes));
  return o_concat(L);
}

static int t_pack(lua_State *L) {
  charge(L, lua_gettop(L) + 1);
  return o_pack(L);
}

static int t_unpack(lua_State *L) {
  lua_Integer i = luaL_optinteger(L, 2, 1);
  lua_Integer e = lua_isnoneornil(L, 3) ? luaL_len(L, 1) : luaL_checkinteger(L, 3);
  lua_Integer n = span(i, e);
  if (n <= 1000000) charge(L, n + 1); /* more: Lua's unpack refuses before any work */
  return o_unpack(L);
}

static int t_sort(lua_State *L) {
  lua_Integer n = len_of(L, 1, TAB_R | TAB_W);
  if (n > 1 && n < INT_MAX) {
    lua_Integer lg = 1;
    while (lg < 62 && ((lua_Integer)1 << lg) < n) lg++;
    charge(L, n * (lg + 1));
  }
  return o_sort(L);
}

/* ---- utf8 ---- */

static int u_utfchar(lua_State *L) {
  charge(L, lua_gettop(L) + 1);
  return o_uchar(L);
}
static int u_codepoint(lua_State *L) { return s_bytes_of_arg1(L, o_codepoint); }
static int u_len(lua_State *L) { return s_bytes_of_arg1(L, o_ulen); }
static int u_offset(lua_State *L) { return s_bytes_of_arg1(L, o_offset); }

/* ---- base ---- */

static int b_tonumber(lua_State *L) {
  if (lua_type(L, 1) == LUA_TSTRING) charge(L, BYTES(lua_rawlen(L, 1)));
  return o_tonumber(L);
}

/* pcall that cannot catch a trip */
static int b_pcall(lua_State *L) {
  luaL_checkany(L, 1);
  lua_pushboolean(L, 1);
  lua_insert(L, 1);                                 /* [true, f, args...] */
  int status = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 0);
  if (status == LUA_OK) return lua_gettop(L);
  rethrow_trip(L, status);
  lua_pushboolean(L, 0);
  lua_pushvalue(L, -2);
  return 2;                                         /* false, error */
}

/* xpcall whose handler runs as an ordinary call, after the protected call returned */
static int b_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushboolean(L, 1);
  lua_pushvalue(L, 1);
  lua_rotate(L, 3, 2);                              /* [f, h, true, f, args...] */
  int status = lua_pcall(L, n - 2, LUA_MULTRET, 0);
  if (status == LUA_OK) return lua_gettop(L) - 2;
  rethrow_trip(L, status);                          /* [f, h, true, err] */
  lua_pushvalue(L, 2);
  lua_insert(L, -2);                                /* [f, h, true, h, err] */
  status = lua_pcall(L, 1, 1, 0);
  rethrow_trip(L, status);                          /* [f, h, true, result] */
  lua_pushboolean(L, 0);
  lua_replace(L, 3);
  return 2;                                         /* false, h(err) */
}

/* ---- string.find, plain only ----
 * Launch code gets no patterns: string.find(s, text [, init], true) finds text literally
 * (what a launch script might want: a kernel's name, a flag), charged by the bytes it scans;
 * string.find without plain, match, gmatch and gsub are not in the sandbox (docs/security.md:
 * Lua's own matcher backtracks without bound, and the tree holds only code written here). */
static int s_find(lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  size_t init = posrelatI(luaL_optinteger(L, 3, 1), ls) - 1;
  if (!lua_toboolean(L, 4))
    return luaL_error(L, "string.find: patterns are not offered in the sandbox (launch code, task files); "
                         "find text with string.find(s, text, init, true)");
  if (init > ls) { luaL_pushfail(L); return 1; }
  charge(L, BYTES(ls - init));
  const char *hit = lp == 0 ? s + init : memmem(s + init, ls - init, p, lp);
  if (!hit) { luaL_pushfail(L); return 1; }
  lua_pushinteger(L, (lua_Integer)(hit - s) + 1);
  lua_pushinteger(L, (lua_Integer)(hit - s + lp));
  return 2;
}

static int s_unoffered(lua_State *L) {
  return luaL_error(L, "%s is not offered in the sandbox (no patterns in launch code or task files)",
                    lua_tostring(L, lua_upvalueindex(1)));
}

/* ---- assembling the library ---- */

static const luaL_Reg string_fns[] = {
    {"byte", s_byte}, {"char", s_char}, {"find", s_find}, {"format", s_format},
    {"len", NULL}, {"lower", s_lower}, {"rep", s_rep}, {"reverse", s_reverse}, {"sub", s_sub},
    {"upper", s_upper}, {NULL, NULL}};
static const luaL_Reg table_fns[] = {
    {"concat", t_concat}, {"insert", t_insert}, {"move", t_move}, {"pack", t_pack},
    {"remove", t_remove}, {"sort", t_sort}, {"unpack", t_unpack}, {NULL, NULL}};
static const luaL_Reg utf8_fns[] = {
    {"char", u_utfchar}, {"codepoint", u_codepoint}, {"len", u_len},
    {"offset", u_offset}, {NULL, NULL}};

static void push_strlib(lua_State *L) {
  luaL_newlib(L, string_fns);
  lua_pushcfunction(L, o_len); /* O(1): Lua's own */
  lua_setfield(L, -2, "len");
  /* present, so that a script that reaches for them learns why they fail */
  static const char *const unoffered[] = {"match", "gmatch", "gsub", NULL};
  for (int i = 0; unoffered[i]; i++) {
    lua_pushfstring(L, "string.%s", unoffered[i]);
    lua_pushcclosure(L, s_unoffered, 1);
    lua_setfield(L, -2, unoffered[i]);
  }
}

/* limits.lib() -> fresh tables of bounded functions */
static int l_lib(lua_State *L) {
  lua_createtable(L, 0, 6);
  push_strlib(L);
  lua_setfield(L, -2, "string");
  luaL_newlib(L, table_fns);
  lua_setfield(L, -2, "table");
  luaL_newlib(L, utf8_fns);
  lua_pushliteral(L, "[\0-\x7F\xC2-\xFD][\x80-\xBF]*");
  lua_setfield(L, -2, "charpattern");
  lua_setfield(L, -2, "utf8");
  lua_pushcfunction(L, b_tonumber);
  lua_setfield(L, -2, "tonumber");
  lua_pushcfunction(L, b_pcall);
  lua_setfield(L, -2, "pcall");
  lua_pushcfunction(L, b_xpcall);
  lua_setfield(L, -2, "xpcall");
  return 1;
}

/* ==================================================================================== */
/* Paths                                                                                 */
/* ==================================================================================== */

static int l_realpath(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  char out[PATH_MAX];
  if (!realpath(p, out)) return km_fail(L, "NOT_FOUND", "%s: %s", p, strerror(errno));
  lua_pushstring(L, out);
  return 1;
}

static int l_resolve_inside(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  size_t nlen;
  const char *name = luaL_checklstring(L, 2, &nlen);
  if (nlen == 0 || strlen(name) != nlen || nlen >= PATH_MAX)
    return km_fail(L, "BAD_NAME", "'%s' is not a file name", name);
  if (name[0] == '/') return km_fail(L, "ABSOLUTE", "'%s' is an absolute path, not a name inside the folder", name);
  for (const char *c = name; *c;) {
    const char *e = strchr(c, '/');
    size_t n = e ? (size_t)(e - c) : strlen(c);
    if (n == 2 && c[0] == '.' && c[1] == '.')
      return km_fail(L, "DOTDOT", "'%s' is outside the folder (it has a '..' component)", name);
    c += n;
    while (*c == '/') c++;
  }
  char rdir[PATH_MAX], joined[2 * PATH_MAX + 2], rp[PATH_MAX];
  if (!realpath(dir, rdir)) return km_fail(L, "NOT_FOUND", "cannot resolve the folder %s: %s", dir, strerror(errno));
  snprintf(joined, sizeof joined, "%s/%s", dir, name);
  if (!realpath(joined, rp)) return km_fail(L, "NOT_FOUND", "cannot read %s: %s", joined, strerror(errno));
  size_t dl = strlen(rdir);
  int inside = strncmp(rp, rdir, dl) == 0 && (rp[dl] == '/' || rp[dl] == '\0' || (dl == 1 && rdir[0] == '/'));
  if (!inside) return km_fail(L, "OUTSIDE", "'%s' resolves to %s, outside the folder", name, rp);
  struct stat st;
  if (stat(rp, &st) != 0) return km_fail(L, "NOT_FOUND", "cannot read %s: %s", joined, strerror(errno));
  lua_pushstring(L, rp);
  lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory" : "other");
  lua_pushinteger(L, (lua_Integer)st.st_size);
  return 3;
}

/* ==================================================================================== */

static lua_CFunction cfield(lua_State *L, const char *lib, lua_CFunction open, const char *name) {
  luaL_requiref(L, lib, open, 0);  /* [lib] */
  lua_getfield(L, -1, name);
  lua_CFunction f = lua_tocfunction(L, -1);
  lua_pop(L, 2);
  if (!f) luaL_error(L, "km.limits: %s.%s is not Lua's C function", lib, name);
  return f;
}

int luaopen_km_limits(lua_State *L) {
  o_byte = cfield(L, LUA_STRLIBNAME, luaopen_string, "byte");
  o_char = cfield(L, LUA_STRLIBNAME, luaopen_string, "char");
  o_format = cfield(L, LUA_STRLIBNAME, luaopen_string, "format");
  o_lower = cfield(L, LUA_STRLIBNAME, luaopen_string, "lower");
  o_upper = cfield(L, LUA_STRLIBNAME, luaopen_string, "upper");
  o_rep = cfield(L, LUA_STRLIBNAME, luaopen_string, "rep");
  o_reverse = cfield(L, LUA_STRLIBNAME, luaopen_string, "reverse");
  o_sub = cfield(L, LUA_STRLIBNAME, luaopen_string, "sub");
  o_len = cfield(L, LUA_STRLIBNAME, luaopen_string, "len");
  o_concat = cfield(L, LUA_TABLIBNAME, luaopen_table, "concat");
  o_insert = cfield(L, LUA_TABLIBNAME, luaopen_table, "insert");
  o_move = cfield(L, LUA_TABLIBNAME, luaopen_table, "move");
  o_pack = cfield(L, LUA_TABLIBNAME, luaopen_table, "pack");
  o_remove = cfield(L, LUA_TABLIBNAME, luaopen_table, "remove");
  o_sort = cfield(L, LUA_TABLIBNAME, luaopen_table, "sort");
  o_unpack = cfield(L, LUA_TABLIBNAME, luaopen_table, "unpack");
  o_uchar = cfield(L, LUA_UTF8LIBNAME, luaopen_utf8, "char");
  o_codepoint = cfield(L, LUA_UTF8LIBNAME, luaopen_utf8, "codepoint");
  o_ulen = cfield(L, LUA_UTF8LIBNAME, luaopen_utf8, "len");
  o_offset = cfield(L, LUA_UTF8LIBNAME, luaopen_utf8, "offset");
  o_tonumber = cfield(L, LUA_GNAME, luaopen_base, "tonumber");

  for (int i = 1; i < WHY_COUNT; i++) {
    lua_pushstring(L, why_raise[i]);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &why_keys[i]);
  }
  push_strlib(L); /* what strings' methods are during a run: not reachable from inside */
  lua_rawsetp(L, LUA_REGISTRYINDEX, &strlib_key);
  memcap_get(L);

  static const luaL_Reg fns[] = {{"run", l_run},           {"lib", l_lib},
                                 {"memory", l_memory},     {"realpath", l_realpath},
                                 {"resolve_inside", l_resolve_inside}, {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushinteger(L, KM_LIMITS_SIGNAL);
  lua_setfield(L, -2, "signal");
  return 1;
}
