/*
** smolwf: runs Lua scripts inside the host, like lua.c does (the arg
** table, -e, -, -v), with smol.core preloaded and package.path pointing
** at the project's modules; `smolwf NAME ...` runs the command module
** smol.cli.NAME. main() runs pmain under lua_pcall, so even setup is
** protected, then always leaves through the exit path (exitpath.c).
*/
#include "host.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

/* Runs the function below nargs args with a traceback; reports an error. Returns 1 on success. */
static int docall(lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, host_msghandler);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, nres, base);
  lua_remove(L, base);
  if (status == LUA_OK) return 1;
  host_report(NULL, L, -1);
  lua_pop(L, 1);
  return 0;
}

static int load_status(lua_State *L, int status) {
  if (status == LUA_OK) return 1;
  host_report(NULL, L, -1);
  lua_pop(L, 1);
  return 0;
}

/* arg[0] = the script, arg[1..] its arguments, arg[-n..-1] what came before (lua.c). */
static void create_arg_table(lua_State *L, int argc, char **argv, int script) {
  lua_createtable(L, argc - script, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

/* Runs every -e in order (after the arg table exists, as lua.c). */
static int run_e_options(lua_State *L, int argc, char **argv, int upto) {
  for (int i = 1; i < upto && i < argc; i++) {
    if (strcmp(argv[i], "--path") == 0) i++;  /* its value is not an option */
    if (i >= upto || strncmp(argv[i], "-e", 2) != 0) continue;
    const char *code = argv[i][2] ? argv[i] + 2 : argv[++i];
    int ok = load_status(L, luaL_loadbuffer(L, code, strlen(code), "=(command line)"));
    if (!ok || !docall(L, 0, 0)) return 0;
  }
  return 1;
}

/* The script's arguments, arg[1..n], as varargs (lua.c pushargs). */
static int push_script_args(lua_State *L) {
  lua_getglobal(L, "arg");
  int n = (int)luaL_len(L, -1);
  luaL_checkstack(L, n + 3, "too many arguments to script");
  for (int i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
  lua_remove(L, -n - 1);
  return n;
}

/* Runs the script file (NULL: stdin); returns the exit status. */
static int run_script(lua_State *L, const char *file) {
  if (!load_status(L, luaL_loadfile(L, file))) return 1;  /* skips a #! line */
  int n = push_script_args(L);
  if (!docall(L, n, 1)) return 1;
  return cli_script_status(L, file != NULL ? file : "stdin");
}

/* Converts a command's main() result to an exit status: nil/true 0, false 1, N. */
static int command_status(lua_State *L) {
  if (lua_isinteger(L, -1)) return (int)lua_tointeger(L, -1);
  if (lua_isboolean(L, -1)) return lua_toboolean(L, -1) ? 0 : 1;
  return 0;
}

static int command_module_exists(lua_State *L, const char *cmd) {
  lua_getglobal(L, LUA_LOADLIBNAME);
  lua_getfield(L, -1, "searchpath");
  lua_pushfstring(L, "smol.cli.%s", cmd);
  lua_getfield(L, -3, "path");
  lua_call(L, 2, 1);
  int found = !lua_isnil(L, -1);
  lua_pop(L, 2);
  return found;
}

/* Pushes the module name for command NAME, or returns NULL (nothing pushed). */
static const char *find_command(lua_State *L, const char *name) {
  const char *underscored = luaL_gsub(L, name, "-", "_");  /* provider-check -> provider_check */
  const char *forms[2] = {name, underscored};
  for (int i = 0; i < 2; i++) {
    if (!command_module_exists(L, forms[i])) continue;
    const char *module = lua_pushfstring(L, "smol.cli.%s", forms[i]);
    lua_remove(L, -2);
    return module;
  }
  lua_pop(L, 1);
  return NULL;
}

/* require(module).main({args after the command}); returns the exit status. */
static int run_command(lua_State *L, const char *module, int argc, char **argv, int at) {
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  if (!docall(L, 1, 1)) return 1;
  lua_getfield(L, -1, "main");
  lua_remove(L, -2);
  if (!lua_isfunction(L, -1)) {
    fprintf(stderr, "smolwf: module %s has no main function\n", module);
    return 1;
  }
  lua_createtable(L, argc - at - 1, 0);
  for (int i = at + 1; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - at);
  }
  if (!docall(L, 1, 1)) return 1;
  int status = command_status(L);
  lua_pop(L, 1);
  return status;
}

/* The script or command at argv[c->script]; returns the exit status. */
static int run_main_target(lua_State *L, const cli *c, int argc, char **argv) {
  const char *target = argv[c->script];
  if (c->is_command) {
    const char *module = find_command(L, target);
    if (module != NULL) return run_command(L, module, argc, argv, c->script);
    if (access(target, F_OK) != 0) {
      cli_unknown_command(target);
      return 1;
    }
  }
  return run_script(L, strcmp(target, "-") == 0 ? NULL : target);
}

static void print_version(void) {
  printf("smolwf %s (%s)\n", SMOLWF_VERSION, LUA_RELEASE);
  fflush(stdout);
}

static void setup_state(lua_State *L, const cli *c) {
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_smol_core);
  lua_setfield(L, -2, "smol.core");
  lua_pop(L, 1);
  exitpath_replace_os_exit(L);
  luapath_setup(L, c->paths, c->npaths);
  lua_gc(L, LUA_GCGEN, 0, 0);  /* as lua.c: generational mode */
}

/* Returns the exit status; a usage error is 1, like lua.c. */
static int run_cli(lua_State *L, const cli *c, int argc, char **argv) {
  if (c->error != NULL) {
    cli_report_error(c, argv);
    return 1;
  }
  if (c->help) {
    cli_usage(stdout);
    return 0;
  }
  if (c->version) print_version();
  create_arg_table(L, argc, argv, c->script);
  if (!run_e_options(L, argc, argv, c->script ? c->script : argc)) return 1;
  if (c->script) return run_main_target(L, c, argc, argv);
  if (c->has_e || c->version) return 0;
  if (isatty(0)) {  /* no REPL: say how to use us */
    cli_usage(stderr);
    return 1;
  }
  return run_script(L, NULL);
}

/* Protected setup and run (lua.c's pmain). Returns the status. */
static int pmain(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  luaL_checkversion(L);
  const char **paths = lua_newuserdatauv(L, sizeof(char *) * (size_t)argc, 0);
  cli c;
  cli_parse(argc, argv, &c, paths);
  setup_state(L, &c);
  if (sigint_install(host_get()) != 0) return luaL_error(L, "cannot install the SIGINT handler");
  lua_pushinteger(L, run_cli(L, &c, argc, argv));
  return 1;
}

/*
** Streamed output makes two Lua strings of ~64-90 KiB per event, freed a
** moment later. With glibc's defaults the heap top is given back to the
** kernel (trim above 128 KiB) and taken again on the next event, a page
** fault per 4 KiB touched: about a third of the host's time when
** streaming. Keep up to 8 MiB of free heap instead, and serve blocks up to
** 4 MiB from the heap rather than fresh mmaps. No-op under ASan.
*/
static void tune_malloc(void) {
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
}

static int init_host(smol_host *h) {
  h->progname = "smolwf";
  tune_malloc();
  signal(SIGPIPE, SIG_IGN);  /* a dead child's pipe is EPIPE, not death */
  if (fs_init_exe_path() != 0 || uv_loop_init(&h->loop) != 0) {
    fprintf(stderr, "smolwf: cannot initialize (exe path or event loop)\n");
    return 0;
  }
  h->L = luaL_newstate();
  if (h->L == NULL) {
    fprintf(stderr, "smolwf: cannot create the Lua state: not enough memory\n");
    uv_loop_close(&h->loop);
    return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  smol_host *h = host_get();
  if (!init_host(h)) return EXIT_FAILURE;
  lua_State *L = h->L;
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = EXIT_FAILURE;
  if (lua_pcall(L, 2, 1, 0) == LUA_OK) status = (int)lua_tointeger(L, -1);
  else host_report(NULL, L, -1);
  lua_pop(L, 1);
  status = exitpath_run(L, status, status == 0);
  fflush(NULL);
  exitpath_finish();
  return status;
}
