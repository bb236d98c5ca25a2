/* kmrun.c — the kmrun program: Lua 5.4 with the km.* modules built in.
 *
 *   kmrun SCRIPT.lua [ARGS...]   run a script; it sees `arg` as with the lua interpreter
 *   kmrun COMMAND [ARGS...]      run lua/km/cmd/COMMAND.lua (eval, export, ...; `kmrun help`)
 *   kmrun STRATEGY [TASKS...]    a strategy by name (strategies/STRATEGY.lua) or path
 *   kmrun -e CODE -l NAME -i -E -W -v --   as lua: chunks, libraries, the prompt after
 *                                the script, no LUA_* variables, warnings, versions
 *   kmrun                        interactive prompt (on a terminal), else standard input
 *
 * The command line is read by the shared parser (lua/km/args.lua, through km.main.plan),
 * so kmrun's own flags answer --help, unknown options and bad values like every command;
 * this file then acts on the plan. The Lua library is found relative to the executable
 * (<exe>/lua or <exe>/../lua) and through KM_PATH, never relative to the current
 * directory; LUA_PATH and LUA_CPATH add folders after it, LUA_INIT runs before scripts,
 * -e and the prompt (as lua does; -E turns the three off; commands ignore LUA_INIT).
 * Built-in modules live in package.preload, so `require "km.cuda"` finds them and no
 * globals are added. The prompt edits lines and keeps history with GNU readline or
 * libedit when either can be loaded at run time (KM_READLINE=0: neither). */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "km.h"
#include "km_api.h"

int luaopen_km(lua_State *L); /* km_lua_module.c */

static const char *progname = "kmrun";

/* ---- paths ---- */

/* Finds the lua/ folder that belongs to this executable; "" when there is none. */
static void find_libdir(char *out, size_t n) {
  char exe[PATH_MAX];
  out[0] = '\0';
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return;
  exe[len] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return;
  *slash = '\0';
  static const char *const cands[] = {"%s/lua", "%s/../lua", "%s/../share/kmrun/lua"};
  km_api_find_dir(exe, cands, sizeof cands / sizeof *cands, NULL, out, n);
}

/* Adds the ';'-separated entries of an environment variable (";;" stands for the default,
 * which is already there: it adds nothing). */
static void add_env_path(lua_State *L, luaL_Buffer *b, const char *value) {
  if (!value || !*value) return;
  char *copy = strdup(value), *save = NULL;
  if (!copy) return;
  for (char *d = strtok_r(copy, ";", &save); d; d = strtok_r(NULL, ";", &save)) {
    if (!*d) continue;
    lua_pushfstring(L, ";%s", d);
    luaL_addvalue(b);
  }
  free(copy);
}

static const char *getenv_versioned(const char *name) {
  char v[64];
  snprintf(v, sizeof v, "%s_5_4", name);
  const char *x = getenv(v);
  return x ? x : getenv(name);
}

/* package.path = KM_PATH entries, the bundled library, then (with use_env) LUA_PATH's;
 * package.cpath = KM_CPATH, then LUA_CPATH's. The library comes before LUA_PATH so that
 * km.* cannot be shadowed by accident; KM_PATH is the deliberate way to override it. */
static void set_paths(lua_State *L, const char *libdir, int use_env) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  km_api_add_path(&b, libdir);
  if (use_env) add_env_path(L, &b, getenv_versioned("LUA_PATH"));
  luaL_pushresult(&b);                /* [path] */
  lua_getglobal(L, "package");        /* [path, package] */
  lua_insert(L, -2);                  /* [package, path] */
  lua_setfield(L, -2, "path");
  luaL_buffinit(L, &b);               /* [package] (the buffer may push) */
  const char *kmcpath = getenv("KM_CPATH");
  luaL_addstring(&b, kmcpath ? kmcpath : "");
  if (use_env) add_env_path(L, &b, getenv_versioned("LUA_CPATH"));
  luaL_pushresult(&b);                /* [package, cpath] */
  const char *cp = lua_tostring(L, -1);
  if (*cp == ';') {                   /* no KM_CPATH: drop the leading separator */
    lua_pushstring(L, cp + 1);
    lua_remove(L, -2);
  }
  lua_setfield(L, -2, "cpath");
  lua_pushstring(L, libdir);
  lua_setfield(L, -2, "km_libdir"); /* where km.* Lua modules live, for tools */
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  lua_pushstring(L, exe);
  lua_setfield(L, -2, "km_exe"); /* this program, for starting workers */
  lua_pop(L, 1);
}

/* ---- running chunks (after lua.c) ---- */

static lua_State *globalL = NULL;
static volatile sig_atomic_t interrupted = 0; /* a Ctrl-C stopped the running chunk */

static void lstop(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void laction(int i) {
  interrupted = 1;
  signal(i, SIG_DFL);
  lua_sethook(globalL, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* Set while a command (lua/km/cmd/NAME.lua) runs: an error it did not expect is reported as
 * one line, "kmrun NAME: internal error: ..."; KM_DEBUG=1 keeps lua.c's traceback. Scripts
 * and -e always get the traceback. */
static const char *command = NULL;

static int one_line_errors(void) {
  const char *d = getenv("KM_DEBUG");
  return command && !(d && *d && strcmp(d, "0") != 0);
}

static int msghandler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  if (one_line_errors()) {
    lua_pushstring(L, msg);
    return 1;
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  globalL = L;
  signal(SIGINT, laction);
  int status = lua_pcall(L, narg, nres, base);
  signal(SIGINT, SIG_DFL);
  lua_remove(L, base);
  return status;
}

static int report(lua_State *L, int status) {
  /* Ctrl-C outside a run's own handler (km.signal: setup, a script): one line, exit 130 as
   * a shell expects, never a traceback */
  if (status != LUA_OK && interrupted) {
    fprintf(stderr, "%s: interrupted\n", progname);
    fflush(stderr);
    exit(130);
  }
  if (status != LUA_OK && one_line_errors()) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "%s %s: internal error: ", progname, command);
    for (const char *p = msg ? msg : "(no message)"; *p; p++) fputc(*p == '\n' ? ' ' : *p, stderr);
    fputs(" (KM_DEBUG=1 shows the traceback)\n", stderr);
    fflush(stderr);
    lua_pop(L, 1);
  } else if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "%s: %s\n", progname, msg ? msg : "(no message)");
    fflush(stderr);
    lua_pop(L, 1);
  }
  return status;
}

/* arg = { [-k..-1] = interpreter and options, [0] = script, [1..] = arguments } */
static void create_arg_table(lua_State *L, char **argv, int argc, int script) {
  lua_createtable(L, argc - script - 1, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

/* Runs the file with the arguments after it; exit status follows an integer return.
 * -1: it raised (exit status 1, as lua's); NOT_LOADED: it could not be loaded (a syntax
 * error, an unreadable file): exit status 2, the status `kmrun sweep --strategies` gives
 * the same file, so a strategy that does not load exits alike whichever command ran it. */
#define NOT_LOADED (-2)
static int run_script(lua_State *L, const char *fname, char **argv, int argc, int script) {
  create_arg_table(L, argv, argc, script);
  int status = luaL_loadfile(L, fname);
  if (status != LUA_OK) { report(L, status); return NOT_LOADED; }
  int n = argc - script - 1;
  luaL_checkstack(L, n + 3, "too many arguments to script");
  for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
  status = docall(L, n, 1);
  if (status != LUA_OK) { report(L, status); return -1; }
  if (lua_isfunction(L, -1) && fname) {
    /* a strategy: `return function(ctx) ... end` runs over the tasks named in arg */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "km.run.runner");
    status = docall(L, 1, 1);
    if (status != LUA_OK) { report(L, status); return -1; }
    lua_getfield(L, -1, "main");    /* [fn, runner, main] */
    lua_pushvalue(L, -3);
    lua_pushstring(L, fname);
    lua_getglobal(L, "arg");
    status = docall(L, 3, 1);
    if (status != LUA_OK) { report(L, status); return -1; }
  }
  int code = LUA_OK;
  if (lua_isinteger(L, -1)) code = (int)lua_tointeger(L, -1);
  else if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) code = 1;
  lua_pop(L, 1);
  return code;
}

static int run_string(lua_State *L, const char *code) {
  int status = luaL_loadbuffer(L, code, strlen(code), "=(command line)");
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status);
}

/* ---- interactive prompt (after lua.c: multi-line input, "=expr", _PROMPT/_PROMPT2) ---- */

/* GNU readline or libedit (its readline interface), loaded at run time when present:
 * line editing and history without a build dependency. KM_READLINE=0 turns it off;
 * KM_READLINE=/path/lib.so picks the library. */
typedef char *(*readline_fn)(const char *);
typedef void (*add_history_fn)(const char *);
static readline_fn rl_readline = NULL;
static add_history_fn rl_add_history = NULL;

static void load_readline(void) {
  const char *want = getenv("KM_READLINE");
  if (want && (!strcmp(want, "0") || !strcmp(want, "none") || !*want)) return;
  const char *libs[] = {want, "libreadline.so.8", "libreadline.so", "libedit.so.2", NULL};
  for (size_t i = want ? 0 : 1; libs[i]; i++) {
    void *h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    rl_readline = (readline_fn)dlsym(h, "readline");
    rl_add_history = (add_history_fn)dlsym(h, "add_history");
    if (rl_readline && rl_add_history) return;
    rl_readline = NULL;
    rl_add_history = NULL;
    dlclose(h);
  }
}

#define KM_MAXINPUT 8192
#define EOFMARK "<eof>"

static const char *get_prompt(lua_State *L, int firstline) {
  if (lua_getglobal(L, firstline ? "_PROMPT" : "_PROMPT2") == LUA_TNIL) {
    lua_pop(L, 1);
    return lua_pushstring(L, firstline ? "> " : ">> "); /* [prompt] */
  }
  const char *p = luaL_tolstring(L, -1, NULL); /* [value, string] */
  lua_remove(L, -2);                          /* [string]: popped by the caller */
  return p;
}

/* A syntax error that ends at <eof>: the statement goes on, on the next line. */
static int incomplete(lua_State *L, int status) {
  if (status == LUA_ERRSYNTAX) {
    size_t n;
    const char *msg = lua_tolstring(L, -1, &n);
    if (n >= sizeof EOFMARK - 1 && !strcmp(msg + n - (sizeof EOFMARK - 1), EOFMARK)) {
      lua_pop(L, 1);
      return 1;
    }
  }
  return 0;
}

/* Reads a line and pushes it; 0 at the end of input. */
static int pushline(lua_State *L, int firstline) {
  const char *prompt = get_prompt(L, firstline); /* [prompt] */
  char buffer[KM_MAXINPUT];
  char *line = NULL;
  size_t n;
  if (rl_readline) {
    line = rl_readline(prompt);
    if (!line) { lua_pop(L, 1); return 0; }
  } else {
    fputs(prompt, stdout);
    fflush(stdout);
    if (!fgets(buffer, sizeof buffer, stdin)) { lua_pop(L, 1); return 0; }
    line = buffer;
  }
  lua_pop(L, 1); /* the prompt */
  n = strlen(line);
  if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
  if (firstline && line[0] == '=') lua_pushfstring(L, "return %s", line + 1); /* Lua 5.2's "=x" */
  else lua_pushlstring(L, line, n);
  if (line != buffer) free(line);
  return 1;
}

static void saveline(const char *line) {
  if (rl_add_history && line[0] != '\0') rl_add_history(line);
}

/* [line] -> [line, chunk]: the line as "return LINE;" (an expression prints its values). */
static int addreturn(lua_State *L) {
  const char *line = lua_tostring(L, -1);
  const char *retline = lua_pushfstring(L, "return %s;", line);
  int status = luaL_loadbuffer(L, retline, strlen(retline), "=stdin");
  if (status == LUA_OK) {
    lua_remove(L, -2);
    saveline(line);
  } else {
    lua_pop(L, 2);
  }
  return status;
}

/* [line] -> [lines, chunk or message]: more lines until the statement is complete. */
static int multiline(lua_State *L) {
  for (;;) {
    size_t len;
    const char *line = lua_tolstring(L, 1, &len);
    int status = luaL_loadbuffer(L, line, len, "=stdin");
    if (!incomplete(L, status) || !pushline(L, 0)) {
      saveline(line);
      return status;
    }
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

/* Leaves a compiled chunk (or an error message) alone on the stack; -1 at the end of input. */
static int loadline(lua_State *L) {
  lua_settop(L, 0);
  if (!pushline(L, 1)) return -1;
  int status = addreturn(L);
  if (status != LUA_OK) status = multiline(L);
  lua_remove(L, 1);
  return status;
}

static void print_results(lua_State *L) {
  int n = lua_gettop(L);
  if (n > 0) {
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    lua_getglobal(L, "print");
    lua_insert(L, 1);
    if (lua_pcall(L, n, 0, 0) != LUA_OK) report(L, LUA_ERRRUN);
  }
}

static void repl(lua_State *L) {
  load_readline();
  printf("kmrun %s (%s) — Ctrl-D to leave\n", KM_VERSION, LUA_RELEASE);
  fflush(stdout);
  int status;
  while ((status = loadline(L)) != -1) {
    if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
    if (status == LUA_OK) print_results(L);
    else report(L, status);
  }
  lua_settop(L, 0);
  putchar('\n');
  fflush(stdout);
}

static int print_version(lua_State *L) {
  printf("kmrun %s, %s\n", KM_VERSION, LUA_RELEASE);
  /* Each module may describe its own dependency's version. */
  const char *probe =
      "local ok, nv = pcall(require, 'km.nvrtc'); "
      "if ok and nv.version then print('NVRTC ' .. nv.version()) end "
      "local okc, cu = pcall(require, 'km.cuda'); "
      "if okc then local a, why = cu.available(); "
      "print(a and ('CUDA driver ' .. cu.driver_version()) or "
      "('CUDA driver: none here (' .. tostring(why):gsub('^no CUDA driver: ', '') .. ')')) end";
  return run_string(L, probe);
}

/* ---- the command line: km.main reads it (the shared parser), this acts on it ---- */

/* LUA_INIT_5_4 or LUA_INIT: "@FILE" runs the file, anything else is a chunk. */
static int handle_luainit(lua_State *L) {
  const char *name = "=LUA_INIT_5_4";
  const char *init = getenv(name + 1);
  if (!init) {
    name = "=LUA_INIT";
    init = getenv(name + 1);
  }
  if (!init) return LUA_OK;
  int status = init[0] == '@' ? luaL_loadfile(L, init + 1)
                              : luaL_loadbuffer(L, init, strlen(init), name);
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status);
}

/* -l NAME: global NAME = require "NAME" (-l g=NAME: global g; a "-suffix" is dropped from
 * the global's name, as lua does). */
static int dolibrary(lua_State *L, const char *arg) {
  char globname[512];
  snprintf(globname, sizeof globname, "%s", arg);
  char *suffix = NULL;
  char *modname = strchr(globname, '=');
  if (!modname) {
    modname = globname;
    suffix = strchr(modname, '-');
  } else {
    *modname++ = '\0';
  }
  lua_getglobal(L, "require");
  lua_pushstring(L, modname);
  int status = docall(L, 1, 1);
  if (status == LUA_OK) {
    if (suffix) *suffix = '\0';
    lua_setglobal(L, globname);
  }
  return report(L, status);
}

/* Pushes the plan km.main makes of argv; returns 1, or 0 with *rc the exit status (the
 * help or an error already printed). */
static int get_plan(lua_State *L, int argc, char **argv, int *rc) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "km.main");
  int status = docall(L, 1, 1);
  if (status != LUA_OK) {
    fprintf(stderr, "%s: cannot load its Lua library (lua/ beside the executable, or KM_PATH): %s\n",
            progname, lua_tostring(L, -1));
    lua_pop(L, 1);
    *rc = 1;
    return 0;
  }
  lua_getfield(L, -1, "plan");   /* [main, plan] */
  lua_remove(L, -2);             /* [plan] */
  lua_createtable(L, argc, 1);   /* [plan, argv] */
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  status = docall(L, 1, 1);
  if (status != LUA_OK) {
    report(L, status);
    *rc = 1;
    return 0;
  }
  if (lua_isinteger(L, -1)) {
    *rc = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

static int plan_flag(lua_State *L, const char *field) {
  lua_getfield(L, 1, field);
  int v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* The plan's command (into `command`) and script (its path into path). -> the script's argv
 * index, 0 when there is none. [plan] at index 1. */
static int plan_script(lua_State *L, char *path, size_t n) {
  lua_getfield(L, 1, "command");
  static char command_name[128];
  if (lua_isstring(L, -1)) {
    snprintf(command_name, sizeof command_name, "%s", lua_tostring(L, -1));
    command = command_name;
  }
  lua_pop(L, 1);
  int script = 0;
  lua_getfield(L, 1, "script");
  if (lua_isstring(L, -1)) {
    snprintf(path, n, "%s", lua_tostring(L, -1));
    lua_getfield(L, 1, "script_index");
    script = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return script;
}

/* Runs the plan's -e chunks and -l libraries in order. -> 1 at the first that fails, else 0. */
static int run_actions(lua_State *L, int nactions) {
  int rc = 0;
  for (int i = 1; i <= nactions && !rc; i++) {
    lua_getfield(L, 1, "actions");
    lua_rawgeti(L, -1, i);        /* [plan, actions, {opt, value}] */
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);        /* [plan, actions, action, opt, value] */
    char opt = lua_tostring(L, -2)[0];
    lua_replace(L, -4);           /* [plan, value, action, opt] */
    lua_pop(L, 2);                /* [plan, value]: kept while it runs */
    const char *value = lua_tostring(L, -1);
    if (opt == 'e') rc = run_string(L, value) ? 1 : 0;
    else rc = dolibrary(L, value) ? 1 : 0;
    lua_pop(L, 1);
  }
  return rc;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "%s: cannot create Lua state: not enough memory\n", progname);
    return 2;
  }
  luaL_openlibs(L);
  km_api_preload(L, luaopen_km); /* km.* and km itself (require "km": as from a stock lua5.4 with km.so) */
  km_api_tmpname(L);
  lua_pushboolean(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  char libdir[PATH_MAX];
  find_libdir(libdir, sizeof libdir);
  set_paths(L, libdir, 0);

  int rc = 0;
  if (!get_plan(L, argc, argv, &rc)) {
    lua_close(L);
    return rc;
  }
  /* [plan] at index 1 */
  int ignore_env = plan_flag(L, "ignore_env");
  int interactive = plan_flag(L, "interactive");
  int version = plan_flag(L, "version");
  if (plan_flag(L, "warnings")) lua_warning(L, "@on", 0);
  char script_path[PATH_MAX] = "";
  int script = plan_script(L, script_path, sizeof script_path); /* argv index, 0: none */
  lua_getfield(L, 1, "actions");
  int nactions = (int)lua_rawlen(L, -1);
  lua_pop(L, 1);

  if (!ignore_env) set_paths(L, libdir, 1);
  create_arg_table(L, argv, argc, script);
  if (version && print_version(L)) rc = 1;
  /* LUA_INIT: before chunks, scripts and the prompt, as lua runs it; not before commands */
  if (!rc && !ignore_env && !command && handle_luainit(L) != LUA_OK) rc = 1;
  if (!rc) rc = run_actions(L, nactions);
  if (!rc && script) {
    int code = run_script(L, strcmp(script_path, "-") ? script_path : NULL, argv, argc, script);
    rc = code == NOT_LOADED ? 2 : code < 0 ? 1 : code;
  }
  if (!rc && interactive) {
    lua_settop(L, 0);
    command = NULL;
    repl(L);
  } else if (!script && !nactions && !version && !interactive) {
    lua_settop(L, 0);
    if (isatty(0)) repl(L);
    else {
      rc = run_script(L, NULL, argv, argc, 0); /* read a script from standard input */
      rc = rc == NOT_LOADED ? 2 : rc < 0 ? 1 : rc;
    }
  }
  lua_close(L);
  return rc;
}
