/*
** The bwrap probe (see bwrap_probe.h). It starts the very sandbox a
** bwrap/default session would (with empty tmpfs areas and `true` as the
** command), so whatever stops sessions here - no bwrap, user namespaces
** disabled, a container that forbids mounting /proc - shows up once, at
** the first open, with bwrap's own words in the reason.
*/
#define _GNU_SOURCE
#include "bwrap_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bwrap_args.h"
#include "context.h"
#include "job.h"
#include "spawn.h"
#include "strays.h"

/* A probe that takes longer than this is as good as broken. */
#define PROBE_TIMEOUT_MS 10000

/* A probe ends in 10-30 ms: a stopping provider gives it this long before it kills it. */
#define STOP_GRACE_MS 1000

typedef struct probe_waiter {
  void (*done)(void *data);
  void *data;
} probe_waiter;

/* What the probe found, kept for the provider's lifetime (the context's part). */
typedef struct bwrap_probe {
  bool done, running;
  bool usable;
  bool cancelled;          /* killed by bwrap_probe_cancel: its answer says nothing */
  atomic_bool reaped;      /* the job's thread has reaped the probe sandbox */
  char reason[768];
  char program[4096];
  /* The probe sandbox while it runs: spawned on the loop, waited for on a job's thread. */
  pid_t pid;
  int err_fd;
  int status;
  char said[1024];
  job *job;                /* the probe's wait, while it runs */
  probe_waiter *waiters;
  size_t nwaiters;
} bwrap_probe;

/* ====================================================== finding bwrap */

static bool is_executable_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* $SMOLWF_BWRAP, else the first executable `bwrap` in $PATH; false if none. */
static bool find_program(char *program, size_t size) {
  const char *forced = getenv("SMOLWF_BWRAP");
  if (forced && *forced) {
    snprintf(program, size, "%s", forced);
    return forced[0] == '/' && is_executable_file(program);
  }
  const char *path = getenv("PATH");
  for (const char *dir = path ? path : ""; *dir; ) {
    size_t len = strcspn(dir, ":");
    if (len > 0 && dir[0] == '/') {
      snprintf(program, size, "%.*s/bwrap", (int)len, dir);
      if (is_executable_file(program)) return true;
    }
    dir += len + (dir[len] == ':');
  }
  return false;
}

/* ====================================================== running the probe */

/* Reads what bwrap says on stderr until it closes it (or the time is up). */
static void read_stderr(int fd, char *buf, size_t size) {
  size_t used = 0;
  struct pollfd p = {fd, POLLIN, 0};
  while (used + 1 < size && poll(&p, 1, PROBE_TIMEOUT_MS) > 0) {
    ssize_t n = read(fd, buf + used, size - 1 - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += (size_t)n;
  }
  buf[used] = '\0';
}

/*
** Starts the probe sandbox, its stderr into b->err_fd. The pid is owned
** (strays.h) until it is reaped, so nothing else reaps it first. 0 or -errno.
*/
static int spawn_probe(bwrap_probe *b) {
  static char *const command[] = {"true", NULL};
  static char *const env[] = {"PATH=/usr/bin:/bin", NULL};
  profile plain = {.name = "bwrap/default", .isolation = ISOLATION_NAMESPACES};   /* no binds, no network */
  bwrap_layout layout = {.profile = &plain, .command = command};
  argvec argv = {0};
  bwrap_args_build(&argv, b->program, &layout);
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) { argvec_clear(&argv); return -errno; }
  spawn_spec spec = {.argv = argv.v, .envp = env, .fd_in = -1, .fd_out = -1, .fd_err = pipefd[1]};
  b->pid = spawn_start(&provider_ctx()->spawn, &spec);
  close(pipefd[1]);
  argvec_clear(&argv);
  b->said[0] = '\0';
  if (b->pid < 0) { close(pipefd[0]); return b->pid; }
  strays_own(b->pid);
  b->err_fd = pipefd[0];
  return 0;
}

/* Reads what the probe says until it ends (or the time is up), and reaps it. Blocks: a job's work. */
static void await_probe(bwrap_probe *b) {
  read_stderr(b->err_fd, b->said, sizeof b->said);
  kill(-b->pid, SIGKILL);   /* no-op after a normal exit; ends a probe that hung */
  while (waitpid(b->pid, &b->status, 0) < 0)
    if (errno != EINTR) { b->status = -errno; break; }
  atomic_store(&b->reaped, true);
}

/* ====================================================== explaining a failure */

static long read_sysctl(const char *path) {
  FILE *f = fopen(path, "r");
  long value = -1;
  if (f && fscanf(f, "%ld", &value) != 1) value = -1;
  if (f) fclose(f);
  return value;
}

/* The kernel setting that forbids user namespaces, if one does. */
static const char *userns_switch_off(void) {
  if (read_sysctl("/proc/sys/user/max_user_namespaces") == 0)
    return "user namespaces are disabled (user.max_user_namespaces = 0)";
  if (read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == 0 && geteuid() != 0)
    return "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)";
  if (read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1 && geteuid() != 0)
    return "AppArmor restricts unprivileged user namespaces "
           "(kernel.apparmor_restrict_unprivileged_userns = 1)";
  return NULL;
}

/* The first line bwrap wrote, without its "bwrap: " prefix. */
static const char *first_line(char *text) {
  text[strcspn(text, "\n")] = '\0';
  return strncmp(text, "bwrap: ", 7) == 0 ? text + 7 : text;
}

static void explain_failure(bwrap_probe *b, int status, char *said) {
  const char *off = userns_switch_off();
  if (off)
    snprintf(b->reason, sizeof b->reason, "%s; bwrap says: %.500s", off, first_line(said));
  else if (status < 0)
    snprintf(b->reason, sizeof b->reason, "cannot start %.500s: %s", b->program, strerror(-status));
  else if (*said)
    snprintf(b->reason, sizeof b->reason, "bwrap cannot create a sandbox here: %.600s", first_line(said));
  else
    snprintf(b->reason, sizeof b->reason, "bwrap cannot create a sandbox here (%s %d)",
             WIFSIGNALED(status) ? "killed by signal" : "exit status",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* The answer (from the probe's status, unless the reason is known already); then whoever waited hears. */
static void conclude(bwrap_probe *b, int status) {
  b->usable = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!b->usable && !b->reason[0]) explain_failure(b, status, b->said);
  b->done = true;
  b->running = false;
  b->job = NULL;
  probe_waiter *w = b->waiters;
  size_t n = b->nwaiters;
  b->waiters = NULL;
  b->nwaiters = 0;
  for (size_t i = 0; i < n; i++) w[i].done(w[i].data);
  free(w);
}

static void probe_work(job *j) {
  await_probe(j->data);
}

static void probe_done(job *j) {
  bwrap_probe *b = j->data;
  close(b->err_fd);
  strays_disown(b->pid);
  conclude(b, b->status);
}

/*
** Starts the probe: on a job, so the loop goes on serving (`wait`: here
** and now instead). Without a bwrap to run, or without a thread, it ends at once.
*/
static void start_probe(bwrap_probe *b, bool wait) {
  b->running = true;
  if (!find_program(b->program, sizeof b->program)) {
    snprintf(b->reason, sizeof b->reason, "%s",
             getenv("SMOLWF_BWRAP") && *getenv("SMOLWF_BWRAP")
               ? "bubblewrap not found at $SMOLWF_BWRAP"
               : "bubblewrap (bwrap) is not installed or not in PATH");
    conclude(b, -ENOENT);
    return;
  }
  int rc = spawn_probe(b);
  if (rc < 0) { conclude(b, rc); return; }
  if (!wait && (b->job = job_start(provider_ctx()->loop, probe_work, probe_done, b))) return;
  await_probe(b);
  probe_done(&(job){.data = b});
}

static bwrap_probe *part(void) {
  return CTX_PART(bwrap);
}

bool bwrap_probed(void) {
  return part()->done;
}

void bwrap_probe_then(void (*done)(void *data), void *data) {
  bwrap_probe *b = part();
  if (b->done) { done(data); return; }
  probe_waiter *grown = realloc(b->waiters, (b->nwaiters + 1) * sizeof *grown);
  if (!grown) abort();
  b->waiters = grown;
  b->waiters[b->nwaiters++] = (probe_waiter){done, data};
  if (!b->running) start_probe(b, false);
}

/*
** The answer now. Callers on the serving path wait through
** bwrap_probe_then first; any other (a benchmark, a stop) blocks for it.
*/
static const bwrap_probe *probed(void) {
  bwrap_probe *b = part();
  if (b->done) return b;
  if (b->job) job_finish_now(b->job);   /* its end concludes */
  else if (!b->running) start_probe(b, true);
  return b;
}

bool bwrap_usable(const char **why) {
  const bwrap_probe *b = probed();
  if (why) *why = b->usable ? NULL : b->reason;
  return b->usable;
}

const char *bwrap_program(void) {
  const bwrap_probe *b = probed();
  return b->usable ? b->program : NULL;
}

void bwrap_probe_cancel(void) {
  bwrap_probe *b = part();
  if (!b->job) return;
  /* a describe waiting for it then gets the true answer */
  for (int waited = 0; waited < STOP_GRACE_MS && !atomic_load(&b->reaped); waited += 2) usleep(2000);
  if (!atomic_load(&b->reaped)) {
    kill(-b->pid, SIGKILL);   /* its stderr ends with it: the wait returns at once */
    b->cancelled = true;
  }
  job_finish_now(b->job);
}

bool bwrap_probe_cancelled(void) {
  return part()->cancelled;
}

void bwrap_probe_free(void) {
  provider *ctx = provider_ctx();
  if (ctx->bwrap) free(ctx->bwrap->waiters);
  free(ctx->bwrap);
  ctx->bwrap = NULL;
}
