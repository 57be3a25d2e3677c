/*
** The bwrap backend's own cost, without the protocol: the median time to
** start /bin/true in one long-lived bubblewrap session (START -> STARTED ->
** EXITED through the helper) and wait for its exit, against a plain
** spawn_start + waitpid of the same command, interleaved one by one so a
** busy machine slows both alike.
**
**   smolwf-bench-bwrap-exec [N]        (default N = 2000)
**
** Target: the sandboxed exec within 1.25x of the plain loop.
** The program is also its own helper (`... helper`), as smolwf-provider is.
*/
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "median.h"
#include "backend.h"
#include "context.h"
#include "discard.h"
#include "process.h"
#include "sandbox_helper.h"
#include "session.h"

static int exits_seen;
static bool opened, open_failed;

/* The backend's open ends here: HELLO came, or the sandbox did not start. */
void backend_opened(session *s, const failure *f) {
  (void)s;
  opened = true;
  if (f) { open_failed = true; fprintf(stderr, "smolwf-bench-bwrap-exec: open: %s: %s\n", f->code, f->message); }
}

/* The backend reports exits here; the benchmark only counts them. */
void proc_exited(proc *p, int wait_status) {
  (void)p;
  (void)wait_status;
  exits_seen++;
}

/* A sandbox that became unusable (never here, unless the helper fails): ended here and now. */
void session_discard_sandbox(session *s) {
  if (!s->close_wait) return;
  s->close_wait(s->close_data);
  s->close_done(s->close_data);
  s->close_wait = NULL;
}

/* The session has no disk allowance, so the disk watch never asks for its processes. */
bool procs_running(const session *s) {
  (void)s;
  return false;
}

void procs_signal_running(session *s, int signo) {
  (void)s;
  (void)signo;
}

/* Nor does it answer requests waiting for a measure. */
void reply_error(request *r, const char *code, const char *fmt, ...) {
  (void)r;
  (void)code;
  (void)fmt;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double median_ms(double *v, int n) {
  return bench_median(v, (size_t)n) * 1e3;
}

/* A session with just what the backend needs: its directories, profile and loop. */
static int open_session(session *s, char *root) {
  static char ws[4200], tmp[4200];
  if (!mkdtemp(root)) return -1;
  snprintf(ws, sizeof ws, "%s/workspace", root);
  snprintf(tmp, sizeof tmp, "%s/tmp", root);
  if (mkdir(ws, 0700) < 0 || mkdir(tmp, 0700) < 0) return -1;
  memset(s, 0, sizeof *s);
  s->id = "bench";
  s->workspace_host = ws;
  s->tmp_host = tmp;
  s->workspace_fd = s->written_fd = s->tmp_fd = -1;
  s->profile = profile_find("bwrap", "default");
  failure f;
  int rc = backend_bwrap.open(s, &f);
  if (rc < 0) { fprintf(stderr, "smolwf-bench-bwrap-exec: open: %s: %s\n", f.code, f.message); return -1; }
  while (!opened) uv_run(provider_ctx()->loop, UV_RUN_ONCE);
  return open_failed ? -1 : 0;
}

static double time_sandboxed(session *s, const spawn_spec *spec) {
  proc p;
  memset(&p, 0, sizeof p);
  int before = exits_seen;
  double t0 = now();
  if (backend_bwrap.start(s, &p, spec) < 0) return -1;
  while (exits_seen == before) uv_run(provider_ctx()->loop, UV_RUN_ONCE);
  return now() - t0;
}

static double time_plain(const spawn_spec *spec) {
  double t0 = now();
  pid_t pid = spawn_start(&provider_ctx()->spawn, spec);
  if (pid > 0) waitpid(pid, NULL, 0);
  return now() - t0;
}

static int run(session *s, int n) {
  static char *const argv[] = {"/bin/true", NULL};
  static char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
  spawn_spec inside = {.argv = argv, .envp = envp, .cwd = "/workspace", .fd_in = -1, .fd_out = -1, .fd_err = -1};
  spawn_spec plain = inside;
  plain.cwd = "/";
  double *sandboxed = calloc((size_t)n, sizeof *sandboxed), *direct = calloc((size_t)n, sizeof *direct);
  for (int i = 0; i < n; i++) {
    sandboxed[i] = time_sandboxed(s, &inside);
    direct[i] = time_plain(&plain);
    if (sandboxed[i] < 0) { fprintf(stderr, "smolwf-bench-bwrap-exec: start failed\n"); return 1; }
  }
  double b = median_ms(sandboxed, n), d = median_ms(direct, n);
  printf("%-50s %.3f ms\n", "plain spawn_start + waitpid of /bin/true", d);
  printf("%-50s %.3f ms   (%.2fx the plain loop; target <= 1.25x)\n",
         "/bin/true in a bwrap session (backend only)", b, b / d);
  free(sandboxed);
  free(direct);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "helper") == 0) return sandbox_helper_main(argc, argv);
  int n = argc >= 2 ? atoi(argv[1]) : 2000;
  char err[256], root[] = "/tmp/smolwf-bench-bwrap.XXXXXX";
  session s;
  provider *ctx = provider_ctx();
  ctx->loop = uv_default_loop();
  spawn_setup_init(&ctx->spawn, &ctx->sched);
  if (n < 1 || profiles_load(NULL, err, sizeof err) < 0 || open_session(&s, root) < 0) return 1;
  int rc = run(&s, n);
  double t0 = now();
  backend_bwrap.close(&s);
  if (s.close_wait) { s.close_wait(s.close_data); s.close_done(s.close_data); }
  printf("%-50s %.2f ms\n", "closing the session (sandbox torn down, reaped)", (now() - t0) * 1e3);
  uv_run(ctx->loop, UV_RUN_DEFAULT);
  free(s.workspace_view);
  free(s.tmp_view);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) rc = 1;
  profiles_free();
  uv_loop_close(ctx->loop);
  return rc;
}
