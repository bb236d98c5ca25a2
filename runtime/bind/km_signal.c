/* km_signal.c — `require "km.signal"`: SIGINT and SIGTERM as a flag a run polls.
 *
 *   local sig = require "km.signal"
 *   sig.catch()              -- from now on the first SIGINT/SIGTERM only sets the flag
 *   if sig.caught() then ... end   -- "SIGINT", "SIGTERM" or nil
 *   sig.release()            -- the handlers that were there before catch()
 *
 * A run (km.run.sweep) stops starting work when the flag is set, marks what was in flight as
 * interrupted in the store and returns; no Lua error is raised, so no traceback is printed.
 * A second signal while the flag is set restores the default action and re-raises it: a
 * second Ctrl-C ends the process at once, as users expect. A signal within
 * KM_SIGNAL_REPEAT_MS of the first is the same Ctrl-C, not a second one: `timeout -s INT`
 * sends its signal to the process and to its process group, and a terminal's Ctrl-C reaches
 * kmrun and its shell wrapper alike, so one request often arrives twice within microseconds.
 *
 * Ownership: the saved handlers are process-global (signals are); catch() nests by count,
 * and only the outermost release() restores them. */
#include <signal.h>
#include <string.h>
#include <time.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"
#include "km_signal.h"

volatile sig_atomic_t km_signal_caught = 0;

static struct sigaction saved_int, saved_term;
static int depth = 0;
static struct timespec first_at; /* when the caught signal came (written by the handler only) */

long km_signal_ms_since(const struct timespec *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long)(now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

static void on_signal(int sig) {
  if (km_signal_caught) {
    if (km_signal_ms_since(&first_at) < KM_SIGNAL_REPEAT_MS) return; /* the same request, delivered twice */
    /* The second one: the default action (terminate), now. */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  clock_gettime(CLOCK_MONOTONIC, &first_at);
  km_signal_caught = sig;
}

/* sig.catch(): installs the handlers (no SA_RESTART, so a blocking poll wakes up). */
static int l_catch(lua_State *L) {
  if (depth++ == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    km_signal_caught = 0;
    if (sigaction(SIGINT, &sa, &saved_int) || sigaction(SIGTERM, &sa, &saved_term)) {
      depth--;
      return luaL_error(L, "km.signal: sigaction failed");
    }
  }
  return 0;
}

/* sig.release(): the handlers from before the outermost catch(); the flag stays readable. */
static int l_release(lua_State *L) {
  (void)L;
  if (depth > 0 && --depth == 0) {
    sigaction(SIGINT, &saved_int, NULL);
    sigaction(SIGTERM, &saved_term, NULL);
  }
  return 0;
}

static const char *signame(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal";
}

/* sig.caught() -> "SIGINT" | "SIGTERM" | nil, and the signal number. */
static int l_caught(lua_State *L) {
  int sig = km_signal_caught;
  if (!sig) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, signame(sig));
  lua_pushinteger(L, sig);
  return 2;
}

/* sig.clear(): forget a caught signal (tests; a caller that handled it and goes on). */
static int l_clear(lua_State *L) {
  (void)L;
  km_signal_caught = 0;
  return 0;
}

/* sig.exit_status("SIGINT") -> 130: 128 + the signal number, the shell's convention. */
static int l_exit_status(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int sig = !strcmp(name, "SIGINT") ? SIGINT : !strcmp(name, "SIGTERM") ? SIGTERM : 0;
  luaL_argcheck(L, sig != 0, 1, "SIGINT or SIGTERM");
  lua_pushinteger(L, 128 + sig);
  return 1;
}

int luaopen_km_signal(lua_State *L) {
  static const luaL_Reg fns[] = {{"catch", l_catch},   {"release", l_release},
                                 {"caught", l_caught}, {"clear", l_clear},
                                 {"exit_status", l_exit_status}, {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushinteger(L, KM_SIGNAL_REPEAT_MS);
  lua_setfield(L, -2, "REPEAT_MS");
  return 1;
}
