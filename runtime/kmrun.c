/* kmrun.c — the kmrun program: Lua 5.4 with the km.* modules built in.
 *
 *   kmrun SCRIPT.lua [ARGS...]   run a script; it sees `arg` as with the lua interpreter
 *   kmrun COMMAND [ARGS...]      run lua/km/cmd/COMMAND.lua (eval, export, ...)
 *   kmrun -e CODE                run a chunk
 *   kmrun -v                     print versions
 *   kmrun                        interactive prompt (on a terminal)
 *
 * The Lua library is found relative to the executable (<exe>/lua or <exe>/../lua) and
 * through KM_PATH, never relative to the current directory. Built-in modules live in
 * package.preload, so `require "km.cuda"` finds them and no globals are added. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "km.h"

#define KM_MODULE(name) int luaopen_km_##name(lua_State *L);
#include "km_modules.inc"
#undef KM_MODULE

static const luaL_Reg builtin_modules[] = {
#define KM_MODULE(name) {"km." #name, luaopen_km_##name},
#include "km_modules.inc"
#undef KM_MODULE
    {NULL, NULL}};

static const char *progname = "kmrun";

/* ---- paths ---- */

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

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
  const char *cands[] = {"%s/lua", "%s/../lua", "%s/../share/kmrun/lua"};
  for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, cands[i], exe);
    char real[PATH_MAX];
    if (is_dir(p) && realpath(p, real)) {
      snprintf(out, n, "%s", real);
      return;
    }
  }
}

/* package.path = KM_PATH entries, then the bundled library; package.cpath = KM_CPATH. */
static void set_paths(lua_State *L, const char *libdir) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  const char *kmpath = getenv("KM_PATH");
  if (kmpath && *kmpath) {
    char *copy = strdup(kmpath), *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
      lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", d, d);
      luaL_addvalue(&b);
    }
    free(copy);
  }
  if (*libdir) {
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua", libdir, libdir);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);                /* [path] */
  lua_getglobal(L, "package");        /* [path, package] */
  lua_insert(L, -2);                  /* [package, path] */
  lua_setfield(L, -2, "path");
  const char *kmcpath = getenv("KM_CPATH");
  lua_pushstring(L, kmcpath ? kmcpath : "");
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

static void preload(lua_State *L) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  for (const luaL_Reg *m = builtin_modules; m->name; m++) {
    lua_pushcfunction(L, m->func);
    lua_setfield(L, -2, m->name);
  }
  lua_pop(L, 1);
}

/* ---- running chunks (after lua.c) ---- */

static lua_State *globalL = NULL;

static void lstop(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void laction(int i) {
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

/* Runs the file with the arguments after it; exit status follows an integer return. */
static int run_script(lua_State *L, const char *fname, char **argv, int argc, int script) {
  create_arg_table(L, argv, argc, script);
  int status = luaL_loadfile(L, fname);
  if (status != LUA_OK) { report(L, status); return -1; }
  int n = argc - script - 1;
  luaL_checkstack(L, n + 3, "too many arguments to script");
  for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
  status = docall(L, n, 1);
  if (status != LUA_OK) { report(L, status); return -1; }
  if (lua_isfunction(L, -1) && fname) {
    /* a strategy: `return function(ctx) ... end` runs over the tasks named in arg */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "km.runner");
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

/* ---- interactive prompt ---- */

static void repl(lua_State *L) {
  char line[8192];
  printf("kmrun %s (%s) — Ctrl-D to leave\n", KM_VERSION, LUA_RELEASE);
  for (;;) {
    fputs("> ", stdout);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) break;
    const char *src = line;
    lua_pushfstring(L, "return %s", src); /* expressions print their value */
    int status = luaL_loadbuffer(L, lua_tostring(L, -1), lua_rawlen(L, -1), "=stdin");
    lua_remove(L, -2);
    if (status != LUA_OK) {
      lua_pop(L, 1);
      status = luaL_loadbuffer(L, src, strlen(src), "=stdin");
    }
    if (status == LUA_OK) {
      int base = lua_gettop(L);
      status = docall(L, 0, LUA_MULTRET);
      if (status == LUA_OK) {
        int n = lua_gettop(L) - base + 1;
        if (n > 0) {
          lua_getglobal(L, "print");
          lua_insert(L, -n - 1);
          if (lua_pcall(L, n, 0, 0) != LUA_OK) report(L, LUA_ERRRUN);
        }
        continue;
      }
    }
    report(L, status);
  }
  putchar('\n');
}

static void usage(void) {
  fprintf(stderr,
          "usage: %s SCRIPT.lua [ARGS...]   run a Lua script (it gets `arg`)\n"
          "       %s COMMAND [ARGS...]      run a kmrun command (see `%s help`)\n"
          "       %s -e CODE                run a chunk of Lua\n"
          "       %s -v                     print versions\n"
          "       %s                        interactive prompt on a terminal\n"
          "environment: KM_PATH (extra Lua module folders, ':'-separated)\n",
          progname, progname, progname, progname, progname, progname);
}

static int print_version(lua_State *L) {
  printf("kmrun %s, %s\n", KM_VERSION, LUA_RELEASE);
  /* Each module may describe its own dependency's version. */
  const char *probe =
      "local ok, nv = pcall(require, 'km.nvrtc'); "
      "if ok and nv.version then print('NVRTC ' .. nv.version()) end "
      "local okc, cu = pcall(require, 'km.cuda'); "
      "if okc then local a, why = cu.available(); "
      "print(a and ('CUDA driver ' .. cu.driver_version()) or ('CUDA driver: ' .. tostring(why))) end";
  return run_string(L, probe);
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "%s: cannot create Lua state: not enough memory\n", progname);
    return 2;
  }
  luaL_openlibs(L);
  preload(L);
  char libdir[PATH_MAX];
  find_libdir(libdir, sizeof libdir);
  set_paths(L, libdir);
  lua_pushboolean(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");

  int rc = 0;
  if (argc < 2) {
    if (isatty(0)) repl(L);
    else {
      rc = run_script(L, NULL, argv, argc, 0); /* read a script from stdin */
      if (rc < 0) rc = 1;
    }
  } else if (!strcmp(argv[1], "-v") || !strcmp(argv[1], "--version")) {
    rc = print_version(L) ? 1 : 0;
  } else if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage();
  } else if (!strcmp(argv[1], "-e")) {
    if (argc < 3) { usage(); rc = 2; }
    else {
      create_arg_table(L, argv, argc, 1);
      rc = run_string(L, argv[2]) ? 1 : 0;
    }
  } else if (argv[1][0] == '-' && argv[1][1] != '\0') {
    fprintf(stderr, "%s: unknown option '%s'\n", progname, argv[1]);
    usage();
    rc = 2;
  } else {
    const char *script = argv[1];
    char cmdpath[PATH_MAX];
    if (!is_file(script) && !strchr(script, '/') && *libdir) {
      snprintf(cmdpath, sizeof cmdpath, "%s/km/cmd/%s.lua", libdir, script);
      if (is_file(cmdpath)) {
        script = cmdpath;
        command = argv[1];
      }
    }
    if (!is_file(script) && strcmp(script, "-") != 0) {
      fprintf(stderr, "%s: cannot open %s: no such script or command\n", progname, argv[1]);
      usage();
      rc = 2;
    } else {
      rc = run_script(L, strcmp(script, "-") ? script : NULL, argv, argc, 1);
      if (rc < 0) rc = 1;
    }
  }
  lua_close(L);
  return rc;
}
