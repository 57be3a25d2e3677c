/*
** Reading the command line. Like lua.c: options come first, the first
** non-option is the script and everything after it belongs to the script.
** A first word that looks like a command name ("run", "test") is a command.
*/
#include "host.h"

#include <string.h>

#include <lauxlib.h>

/* What a misspelled word is compared with for a "did you mean". */
static const char *const COMMANDS[] = {"run", "test", "provider", "provider-check", NULL};
static const char *const OPTIONS[] = {"-e", "-v", "--path", "--help", NULL};

void cli_usage(FILE *to) {
  fputs("usage: smolwf [options] [script [args]]\n"
        "       smolwf [options] COMMAND [args]\n"
        "Commands:\n"
        "  run FILE           run a workflow (a Lua file of steps) and report on it\n"
        "  test [PATHS...]    run test scenarios (busted specs, default spec/) in the host\n"
        "  provider serve F   serve the sandbox provider protocol with methods from F.lua\n"
        "  provider-check     check that a provider program follows the protocol\n"
        "See smolwf COMMAND --help for a command's options.\n"
        "Available options are:\n"
        "  -e CODE     run the string CODE (may be repeated)\n"
        "  -v          show version information\n"
        "  --path DIR  also look for Lua modules in DIR (may be repeated)\n"
        "  --help      show this help\n"
        "  --          stop handling options\n"
        "  -           run stdin as the script\n"
        "Exit status: a script's integer result 0-255 (return 42), 1 for false\n"
        "  or an error, os.exit(N)'s N, else 0.\n"
        "Environment: SMOLWF_PATH  colon-separated list of module directories\n"
        "             SMOLWF_TRACE=1  tracebacks show smolwf's own frames too\n",
        to);
}

/* Levenshtein distance of two short words (longer ones count as far apart). */
static size_t edit_distance(const char *a, const char *b) {
  enum { MAX = 64 };
  size_t la = strlen(a), lb = strlen(b), row[MAX + 1];
  if (la > MAX || lb > MAX) return (size_t)-1;
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[lb];
}

/* The candidate a typo most likely meant (as smol.workflow.validate.closest), or NULL. */
static const char *closest(const char *word, const char *const *candidates) {
  const char *best = NULL;
  size_t best_d = (size_t)-1, limit = strlen(word) / 3 > 2 ? strlen(word) / 3 : 2;
  for (int i = 0; candidates[i] != NULL; i++) {
    size_t d = edit_distance(word, candidates[i]);
    if (d < best_d) best = candidates[i], best_d = d;
  }
  return best_d <= limit ? best : NULL;
}

/* "smolwf: unrecognized option '--pth' (did you mean '--path'?)", then the usage. */
void cli_report_error(const cli *c, char **argv) {
  const char *word = argv[c->script];
  const char *hint = strcmp(c->error, "unrecognized option") == 0 ? closest(word, OPTIONS) : NULL;
  if (hint != NULL) fprintf(stderr, "smolwf: %s '%s' (did you mean '%s'?)\n", c->error, word, hint);
  else fprintf(stderr, "smolwf: %s '%s'\n", c->error, word);
  cli_usage(stderr);
}

void cli_unknown_command(const char *word) {
  const char *hint = closest(word, COMMANDS);
  if (hint != NULL) fprintf(stderr, "smolwf: unknown command '%s' (did you mean '%s'?)\n", word, hint);
  else fprintf(stderr, "smolwf: unknown command '%s' (see smolwf --help)\n", word);
}

/*
** The exit status a script's result (on the stack top, popped here) asks
** for: an integer 0-255 is the status, false is 1, anything else 0 (as a
** command's main() result). A workflow is refused with a pointer to
** `smolwf run`: `smolwf wf.lua` would silently do nothing with it.
*/
int cli_script_status(lua_State *L, const char *file) {
  int status = 0;
  if (lua_istable(L, -1)) {
    if (lua_getfield(L, -1, "steps") == LUA_TTABLE) {
      fprintf(stderr, "smolwf: %s returned a workflow; run it with: smolwf run %s\n", file, file);
      status = 1;
    }
    lua_pop(L, 1);
  } else if (lua_isboolean(L, -1)) {
    status = !lua_toboolean(L, -1);
  } else if (lua_isinteger(L, -1)) {
    lua_Integer n = lua_tointeger(L, -1);
    status = n >= 0 && n <= 255 ? (int)n : 1;
    if (n != status) fprintf(stderr, "smolwf: %s returned %lld, not an exit status (0-255)\n", file, (long long)n);
  }
  lua_pop(L, 1);
  return status;
}

/* A lowercase word such as "run" or "provider-check" (no '.', no '/'). */
int cli_looks_like_command(const char *word) {
  if (!(*word >= 'a' && *word <= 'z')) return 0;
  return word[strspn(word, "abcdefghijklmnopqrstuvwxyz0123456789_-")] == '\0';
}

/* Handles option argv[i]; returns how many argv entries it used, 0 on error. */
static int parse_option(int argc, char **argv, int i, cli *c) {
  const char *a = argv[i];
  if (strcmp(a, "-v") == 0) return c->version = 1;
  if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return c->help = 1;
  if (strncmp(a, "--path=", 7) == 0) {
    c->paths[c->npaths++] = a + 7;
    return 1;
  }
  int takes_value = strcmp(a, "--path") == 0 || strcmp(a, "-e") == 0;
  if (strncmp(a, "-e", 2) == 0 && a[2] != '\0') return c->has_e = 1;  /* -eCODE */
  if (!takes_value) {
    c->error = "unrecognized option";
    return 0;
  }
  if (i + 1 >= argc) {
    c->error = "option needs an argument";
    return 0;
  }
  if (a[1] == 'e') c->has_e = 1;
  else c->paths[c->npaths++] = argv[i + 1];
  return 2;
}

/* paths_storage has room for argc entries. */
void cli_parse(int argc, char **argv, cli *c, const char **paths_storage) {
  memset(c, 0, sizeof *c);
  c->paths = paths_storage;
  int i = 1;
  while (i < argc && argv[i][0] == '-' && argv[i][1] != '\0') {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      if (i < argc) c->script = i;
      return;
    }
    int used = parse_option(argc, argv, i, c);
    if (used == 0) {
      c->script = i;  /* names the bad option in the message */
      return;
    }
    i += used;
  }
  if (i < argc) {
    c->script = i;
    c->is_command = cli_looks_like_command(argv[i]);
  }
}
