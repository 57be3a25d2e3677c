/*
** smolwf-provider: the bundled sandbox provider.
**   smolwf-provider serve [--profiles FILE]   JSON Lines on stdin/stdout (docs/protocol.md)
**   smolwf-provider helper                    internal: runs inside a bubblewrap session
**   smolwf-provider keeper ROOT               internal: ends local sessions' processes if the provider is killed
**   smolwf-provider unpack DIR [ARCHIVE]      extracts a tar beneath DIR (unpack_main.h)
*/
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "archive_methods.h"
#include "bwrap_probe.h"
#include "context.h"
#include "envelope.h"
#include "fd_reserve.h"
#include "keeper.h"
#include "process.h"
#include "profile.h"
#include "relay_sched.h"
#include "sandbox_helper.h"
#include "server.h"
#include "session.h"
#include "strays.h"
#include "unpack_main.h"

static const char usage[] =
  "usage: smolwf-provider serve [--profiles FILE]\n"
  "       smolwf-provider unpack DIR [ARCHIVE]\n"
  "       smolwf-provider --help | --version\n"
  "\n"
  "Serves the sandbox provider protocol (JSON Lines) on stdin and stdout.\n"
  "Profiles: the built-in ones (bwrap/default, bwrap/network, local/default,\n"
  "auto/default) plus those of FILE, or of $SMOLWF_PROFILES when no FILE is given.\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "smolwf-provider: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage);
  return 2;
}

/* The --profiles FILE of `serve`, or $SMOLWF_PROFILES; -1 on a usage error. */
static int parse_serve_args(int argc, char **argv, const char **profiles) {
  *profiles = getenv("SMOLWF_PROFILES");
  if (*profiles && !**profiles) *profiles = NULL;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--profiles") == 0 && i + 1 < argc) *profiles = argv[++i];
    else if (strncmp(argv[i], "--profiles=", 11) == 0) *profiles = argv[i] + 11;
    else return usage_error("serve: unexpected argument `%s`", argv[i]), -1;
  }
  return 0;
}

static int serve(int argc, char **argv) {
  const char *profiles_path;
  if (parse_serve_args(argc, argv, &profiles_path) < 0) return 2;
  char err[1024];
  if (profiles_load(profiles_path, err, sizeof err) < 0) {
    fprintf(stderr, "smolwf-provider: %s\n", err);
    profiles_free();
    return 1;
  }
  /* A host that goes away must show up as a write error, not kill us before cleanup. */
  signal(SIGPIPE, SIG_IGN);
  provider *ctx = provider_ctx();
  relay_sched_enter(&ctx->sched);
  spawn_setup_init(&ctx->spawn, &ctx->sched);
  strays_init();
  fd_reserve_restore();
  ctx->loop = uv_default_loop();
  int rc = server_start(ctx->loop) < 0 ? 1 : 0;
  if (rc == 0) uv_run(ctx->loop, UV_RUN_DEFAULT);
  server_free();
  envelope_free();
  /* no process of ours outlives us: what no session claimed goes too */
  strays_kill_all(1000);
  strays_reap();
  uv_loop_close(ctx->loop);
  procs_free();
  archives_free();
  sessions_free();
  strays_free();
  bwrap_probe_free();
  profiles_free();
  fd_reserve_release();
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage_error("%s", "missing command");
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) { fputs(usage, stdout); return 0; }
  if (strcmp(argv[1], "--version") == 0) { printf("smolwf-provider %s\n", SMOLWF_VERSION); return 0; }
  if (strcmp(argv[1], "serve") == 0) return serve(argc, argv);
  if (strcmp(argv[1], "helper") == 0) return sandbox_helper_main(argc, argv);
  if (strcmp(argv[1], "keeper") == 0) return keeper_main(argc, argv);
  if (strcmp(argv[1], "unpack") == 0) return unpack_main(argc, argv);
  return usage_error("unknown command `%s`", argv[1]);
}
