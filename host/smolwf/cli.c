/*
** Reading the command line. Like lua.c: options come first, the first
** non-option is the script and everything after it belongs to the script.
** A first word that looks like a command name ("run", "test") is a command.
*/
#include "host.h"

#include <string.h>

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
        "Environment: SMOLWF_PATH  colon-separated list of module directories\n",
        to);
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
