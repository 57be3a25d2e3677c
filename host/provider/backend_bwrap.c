/*
** The bubblewrap backend: one long-lived sandbox per session, made at
** open, with the helper (sandbox_helper.c) as pid 1 inside. Every command
** of the session is started by the helper, so they share the session's
** namespaces (pid, /tmp...) and cost about what a plain spawn costs.
**
**   open   socketpairs -> `bwrap ... helper` (channel on its fd 0 and 1)
**          -> the loop reads HELLO (or bwrap's failure, and says why)
**   start  START, tracked at once: nothing is waited for (a START the
**          helper could not run comes back as FAILED on the events channel;
**          one the socket has no room for waits in the outbox,
**          helper_outbox.h)
**   exit   EXITED {tag, status} on the events channel, read by the loop
**   signal SIGNAL {tag, signo}: the helper signals the command's group; a
**          SIGKILL not followed by EXITED within KILL_ANSWER_MS, or an
**          outbox stuck for SEND_TIMEOUT_MS, means the helper is stuck:
**          its commands end as killed and its sandbox is ended on a job
**   close  close the control channel: the helper (pid 1) exits and the
**          kernel kills everything left in the namespace; then reap bwrap
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "bwrap_args.h"
#include "bwrap_probe.h"
#include "context.h"
#include "discard.h"
#include "disk_cap.h"
#include "errcodes.h"
#include "helper_outbox.h"
#include "process.h"
#include "sandbox_helper.h"
#include "session.h"
#include "stderr_relay.h"
#include "strays.h"

/* Bounds on waiting for the helper: it answers in microseconds unless it is gone. */
#define STARTUP_TIMEOUT_MS 10000
/*
** The helper drains the control socket as fast as it starts commands, so
** messages that wait this long for room mean it is stuck.
*/
#define SEND_TIMEOUT_MS 10000
/* The helper reaps a command its SIGKILL ended at once: no EXITED this long after it means it is stuck. */
#define KILL_ANSWER_MS 5000
#define EXIT_TIMEOUT_MS 2000
#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct running {
  uint64_t tag;
  proc *p;
  uint64_t killed_at;      /* uv_now() when a SIGKILL for it went out, 0 before */
} running;

typedef struct bwrap_state {
  int control_fd;          /* our end of the control channel */
  helper_outbox *outbox;   /* what goes out on it, never waiting; NULL once it is closed */
  uv_timer_t answer_timer; /* due when a killed command's EXITED is late; at once when the sandbox became unusable */
  int events_fd;           /* our end of the events channel */
  int helper_pidfd;        /* the helper (pid 1 inside), from HELLO */
  pid_t bwrap_pid;         /* the bwrap monitor process, our child */
  int bwrap_pidfd;
  uv_poll_t events_watch;
  bool watching;
  int err_fd;              /* bwrap's stderr until HELLO: why a sandbox did not start */
  stderr_relay *relay;     /* that stderr after HELLO: what the helper reports, on ours */
  uv_timer_t startup_timer;   /* bounds the wait for HELLO */
  bool starting;           /* HELLO not seen yet: the session's open is pending */
  unsigned handles_open;   /* uv handles not closed yet: the state is freed after the last */
  bool broken;             /* the helper is gone: no more commands */
  uint64_t next_tag;
  running *running;        /* commands started and not yet exited */
  size_t nrunning, running_cap;
} bwrap_state;

/* ====================================================== channel I/O */

static void close_fds(int fds[2]) {
  for (int i = 0; i < 2; i++) if (fds[i] >= 0) close(fds[i]);
  fds[0] = fds[1] = -1;
}

/* Receives one reply and at most two fds (fds[i] = -1 if absent). Bytes read, 0 at EOF, or -errno. */
static ssize_t recv_reply(int sock, helper_reply *r, int fds[2], int flags) {
  union { struct cmsghdr h; char buf[CMSG_SPACE(2 * sizeof(int))]; } ctl;
  struct iovec iov = {r, sizeof *r};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                      .msg_controllen = sizeof ctl.buf};
  ssize_t n;
  do n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags); while (n < 0 && errno == EINTR);
  fds[0] = fds[1] = -1;
  struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL;
  if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int)))
    memcpy(fds, CMSG_DATA(c), c->cmsg_len >= CMSG_LEN(2 * sizeof(int)) ? 2 * sizeof(int) : sizeof(int));
  if (n < 0) return -errno;
  /* A descriptor sent with it that we could not take: our descriptor table is full. */
  if (fds[0] < 0 && (mh.msg_flags & MSG_CTRUNC)) return -EMFILE;
  if (n > 0 && n != (ssize_t)sizeof *r) {
    close_fds(fds);
    return -EPROTO;
  }
  return n;
}

/* ====================================================== bookkeeping */

static void track(bwrap_state *st, uint64_t tag, proc *p) {
  if (st->nrunning == st->running_cap) {
    st->running_cap = st->running_cap ? st->running_cap * 2 : 16;
    st->running = realloc(st->running, st->running_cap * sizeof *st->running);
    if (!st->running) abort();
  }
  st->running[st->nrunning++] = (running){tag, p, 0};
}

/* The proc started under tag, removed from the table; NULL if unknown. */
static proc *untrack(bwrap_state *st, uint64_t tag) {
  for (size_t i = 0; i < st->nrunning; i++) {
    if (st->running[i].tag == tag) {
      proc *p = st->running[i].p;
      st->running[i] = st->running[--st->nrunning];
      return p;
    }
  }
  return NULL;
}

/* ====================================================== exits (from the loop) */

static void stop_watching(bwrap_state *st);

/*
** The helper is gone (it crashed, or bwrap died): the kernel has killed
** every process of the namespace, so each running command ended by SIGKILL.
*/
static void helper_lost(bwrap_state *st) {
  if (!st->broken) fprintf(stderr, "smolwf-provider: a bubblewrap session's sandbox ended unexpectedly\n");
  st->broken = true;
  stop_watching(st);
  while (st->nrunning > 0) {
    proc *p = st->running[--st->nrunning].p;
    proc_exited(p, SIGKILL);   /* a wait status for "killed by SIGKILL" */
  }
}

static bool take_hello(session *s, bwrap_state *st);

static void on_events(uv_poll_t *h, int status, int events) {
  (void)status; (void)events;
  session *s = h->data;
  bwrap_state *st = s->backend_data;
  if (st->starting) { take_hello(s, st); return; }
  for (;;) {
    helper_reply r;
    int fds[2];
    ssize_t n = recv_reply(st->events_fd, &r, fds, MSG_DONTWAIT);
    close_fds(fds);
    if (n == -EAGAIN) break;
    if (n <= 0 || (r.type != HELPER_EXITED && r.type != HELPER_FAILED)) { helper_lost(st); break; }
    proc *p = untrack(st, r.tag);
    if (p && r.type == HELPER_FAILED) {   /* like a program that cannot be executed: 126, and why */
      fprintf(stderr, "smolwf-provider: the sandbox helper could not start a command: %s\n", strerror(-r.value));
      proc_exited(p, 126 << 8);
    } else if (p) {
      proc_exited(p, r.value);
    }
  }
  disk_watch_changed(s, !st->broken);   /* measures now, after exits (disk_cap.h) */
}

static void release_fds(bwrap_state *st);

static void free_state(uv_handle_t *h) {
  bwrap_state *st = h->data;
  if (--st->handles_open > 0) return;
  release_fds(st);
  free(st);
}

static void stop_watching(bwrap_state *st) {
  if (!st->watching) return;
  st->watching = false;
  uv_poll_stop(&st->events_watch);
}

/* ====================================================== open */

/* Why a probe-approved sandbox still failed: what bwrap wrote on stderr (it has exited by now). */
static void startup_failure(int errfd, failure *f) {
  char said[512];
  ssize_t n = errfd >= 0 ? read(errfd, said, sizeof said - 1) : 0;
  said[n > 0 ? n : 0] = '\0';
  said[strcspn(said, "\n")] = '\0';
  fail(f, "internal", "the bubblewrap sandbox did not start: %s",
       *said ? (strncmp(said, "bwrap: ", 7) == 0 ? said + 7 : said) : "no reason given");
}

/* The provider's own executable, bound into the sandbox as the helper. */
static void self_exe(char *path, size_t size) {
  ssize_t n = readlink("/proc/self/exe", path, size - 1);
  path[n > 0 ? n : 0] = '\0';
}

/* HELLO's fds: the helper's pidfd, and the workspace as mounted inside, where file operations start. */
static void keep_hello(session *s, bwrap_state *st, const helper_reply *hello, int fds[2]) {
  st->helper_pidfd = fds[0];
  close(s->workspace_fd);
  s->workspace_fd = fds[1];
  if (s->ws.kind == WORKSPACE_BIND) {   /* the host tree itself is what the session writes */
    close(s->written_fd);
    s->written_fd = fcntl(fds[1], F_DUPFD_CLOEXEC, 0);
  }
  if (s->ws.kind == WORKSPACE_OVERLAY && hello->value < 0) {
    s->ws.kind = WORKSPACE_COPY;   /* the helper bound the upper directory instead: copy into it */
    s->ws.overlay_refused = hello->value;
  }
}

static void stop_starting(bwrap_state *st);

static void relay_stderr(const session *s, bwrap_state *st) {
  char prefix[128];
  snprintf(prefix, sizeof prefix, "smolwf-provider: session %s's sandbox: ", s->id);
  st->relay = stderr_relay_start(provider_ctx()->loop, st->err_fd, prefix);
  st->err_fd = -1;
}

/*
** The helper's first message: HELLO, with two fds. Anything else (bwrap
** exited: end of file) means the sandbox did not come up. Either way the
** session's open ends here.
*/
static bool take_hello(session *s, bwrap_state *st) {
  helper_reply hello;
  int fds[2];
  ssize_t n = recv_reply(st->events_fd, &hello, fds, MSG_DONTWAIT);
  if (n == -EAGAIN) return false;
  failure f;
  bool ok = n > 0 && hello.type == HELPER_HELLO && fds[0] >= 0 && fds[1] >= 0;
  if (ok && hello.tag != helper_build_id()) {
    char exe[PATH_MAX];
    self_exe(exe, sizeof exe);
    ok = fail(&f, "internal", "the sandbox helper %s is not the running provider's build "
              "(was the provider rebuilt since it started? restart it)", exe);
  } else if (n == -EMFILE || n == -ENFILE) {   /* the fds it sent could not be taken */
    fail(&f, "limit_exceeded", "cannot take the sandbox helper's descriptors: %s", strerror((int)-n));
  } else if (!ok) {
    startup_failure(st->err_fd, &f);
  }
  if (ok) {
    keep_hello(s, st, &hello, fds);
    relay_stderr(s, st);
  } else {
    close_fds(fds);
  }
  stop_starting(st);
  backend_opened(s, ok ? NULL : &f);
  return ok;
}

static void on_startup_timeout(uv_timer_t *t) {
  session *s = t->data;
  bwrap_state *st = s->backend_data;
  failure f;
  fail(&f, "internal", "the bubblewrap sandbox did not start within %d ms", STARTUP_TIMEOUT_MS);
  stop_starting(st);
  backend_opened(s, &f);
}

/* `helper`, or `helper overlay UID GID [refuse]` (sandbox_mount.h); under the loader with a root of its own. */
static void helper_command(const session *s, char **command, char ids[2][24]) {
  size_t n = 0;
  if (s->profile->root) {
    command[n++] = (char *)bwrap_helper_loader();
    command[n++] = "--library-path";
    command[n++] = SANDBOX_HELPER_LIBS;
  }
  command[n++] = SANDBOX_HELPER;
  command[n++] = "helper";
  if (s->ws.kind == WORKSPACE_OVERLAY) {
    snprintf(ids[0], sizeof ids[0], "%ld", (long)getuid());
    snprintf(ids[1], sizeof ids[1], "%ld", (long)getgid());
    command[n++] = "overlay";
    command[n++] = ids[0];
    command[n++] = ids[1];
    if (s->ws.refuse_overlay) command[n++] = "refuse";
  }
  command[n] = NULL;
}

/* What the sandbox sees of the session: its areas, and its workspace as session->ws says. */
static void layout_of(const session *s, bwrap_layout *l) {
  l->profile = s->profile;
  l->tmp_host = s->tmp_host;
  l->workspace_host = s->workspace_host;
  if (s->ws.kind == WORKSPACE_BIND || s->ws.kind == WORKSPACE_RO) l->workspace_host = s->ws.host_path;
  l->workspace_ro = s->ws.kind == WORKSPACE_RO;
  if (s->ws.kind == WORKSPACE_OVERLAY) {
    l->overlay_lower = s->ws.host_path;
    l->session_host = s->root;
  }
}

static pid_t start_bwrap(session *s, int control, int events, int errfd) {
  static char *const env[] = {"PATH=/usr/bin:/bin", NULL};
  char *command[12], ids[2][24], exe[PATH_MAX];
  helper_command(s, command, ids);
  self_exe(exe, sizeof exe);
  bwrap_layout layout = {.helper_exe = exe, .command = command};
  layout_of(s, &layout);
  argvec argv = {0};
  bwrap_args_build(&argv, bwrap_program(), &layout);
  spawn_spec spec = {.argv = argv.v, .envp = env, .fd_in = control, .fd_out = events, .fd_err = errfd};
  pid_t pid = spawn_start(&provider_ctx()->spawn, &spec);
  argvec_clear(&argv);
  return pid;
}

/*
** Waits for bwrap to exit after the helper was told to (its control
** channel closed), then by force; reaps it. Blocks up to 2 * EXIT_TIMEOUT_MS,
** so never on the loop: on the job that then removes the session's files
** (end_later).
*/
static void await_end(pid_t pid, int pidfd, int helper_pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  if (pidfd < 0 || poll(&p, 1, EXIT_TIMEOUT_MS) <= 0) kill(pid, SIGKILL);
  /* Killed by force, bwrap's --die-with-parent takes the helper down: wait for that too. */
  struct pollfd h = {helper_pidfd, POLLIN, 0};
  if (helper_pidfd >= 0) {
    syscall(SYS_pidfd_send_signal, helper_pidfd, SIGKILL, NULL, 0);
    poll(&h, 1, EXIT_TIMEOUT_MS);
  }
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}

/* A sandbox told to end, waited for on the job that then removes the session's files. */
typedef struct sandbox_end {
  pid_t pid;
  int pidfd, helper_pidfd;
} sandbox_end;

static void end_wait(void *data) {
  sandbox_end *e = data;
  await_end(e->pid, e->pidfd, e->helper_pidfd);
}

static void end_done(void *data) {
  sandbox_end *e = data;
  strays_disown(e->pid);   /* owned until reaped: nothing else reaps it first */
  strays_reap();   /* a helper that outlived a bwrap killed by force is our child now (we are a subreaper) */
  if (e->pidfd >= 0) close(e->pidfd);
  if (e->helper_pidfd >= 0) close(e->helper_pidfd);
  free(e);
}

/*
** Ends the sandbox without waiting on the loop: the helper is told (its
** control channel closed); the wait for bwrap's exit is the session's
** close_wait (session.h), done before its files are removed.
*/
static void end_later(session *s, bwrap_state *st) {
  if (st->outbox) outbox_close(st->outbox);   /* before the fd goes: libuv watches it */
  st->outbox = NULL;
  if (st->control_fd >= 0) close(st->control_fd);
  st->control_fd = -1;
  if (st->bwrap_pid <= 0) return;
  sandbox_end *e = malloc(sizeof *e);
  if (!e) abort();
  *e = (sandbox_end){st->bwrap_pid, st->bwrap_pidfd, st->helper_pidfd};
  st->bwrap_pid = 0;
  st->bwrap_pidfd = st->helper_pidfd = -1;
  s->close_wait = end_wait;
  s->close_done = end_done;
  s->close_data = e;
}

static void release_fds(bwrap_state *st) {
  if (st->err_fd >= 0) close(st->err_fd);
  st->err_fd = -1;
  if (st->events_fd >= 0) close(st->events_fd);
  if (st->helper_pidfd >= 0) close(st->helper_pidfd);
  if (st->bwrap_pidfd >= 0) close(st->bwrap_pidfd);
  st->events_fd = st->helper_pidfd = st->bwrap_pidfd = -1;
}

/* Starts bwrap on the child ends of the channel; keeps our ends. 0 or -1 with f filled. */
static int spawn_sandbox(session *s, bwrap_state *st, int errfd, failure *f) {
  int control[2], events[2], err;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, control) < 0) goto fail;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, events) < 0) {
    err = errno;
    close(control[0]);
    close(control[1]);
    errno = err;
    goto fail;
  }
  st->control_fd = control[0];
  st->events_fd = events[0];
  st->bwrap_pid = start_bwrap(s, control[1], events[1], errfd);
  if (st->bwrap_pid > 0) strays_own(st->bwrap_pid);
  close(control[1]);
  close(events[1]);
  if (st->bwrap_pid < 0)
    return fail(f, errno_code(-st->bwrap_pid), "cannot start %s: %s", bwrap_program(), strerror(-st->bwrap_pid)), -1;
  st->bwrap_pidfd = (int)syscall(SYS_pidfd_open, st->bwrap_pid, 0);
  return 0;
fail:
  return fail(f, errno_code(errno), "cannot create the sandbox channel: %s", strerror(errno)), -1;
}

/* Starts the sandbox; HELLO comes later (on_events). 0, or -1 with f filled. */
static int launch(session *s, bwrap_state *st, failure *f) {
  int err[2];
  if (pipe2(err, O_CLOEXEC | O_NONBLOCK) < 0)
    return fail(f, errno_code(errno), "cannot create a pipe for the sandbox: %s", strerror(errno)), -1;
  int rc = spawn_sandbox(s, st, err[1], f);
  close(err[1]);
  st->err_fd = err[0];
  return rc;
}

static void set_views(session *s) {
  free(s->workspace_view);
  free(s->tmp_view);
  s->workspace_view = strdup(SANDBOX_WORKSPACE);
  s->tmp_view = strdup(SANDBOX_TMP);
}

/* A missing bind source (or root) would stop bwrap with a terse message; say which and where. */
static int check_binds(const profile *p, failure *f) {
  for (size_t i = 0; i < p->nbinds; i++) {
    if (access(p->binds[i].host_path, F_OK) == 0) continue;
    return fail(f, errno == ENOENT ? "not_found" : "permission_denied", "bind of %s (at %s in the sandbox): %s",
                p->binds[i].host_path, p->binds[i].sandbox_path, strerror(errno)), -1;
  }
  struct stat st;
  if (p->root && (stat(p->root, &st) < 0 || !S_ISDIR(st.st_mode)))
    return fail(f, errno == EACCES ? "permission_denied" : "not_found", "root %s: %s", p->root,
                errno ? strerror(errno) : "not a directory"), -1;
  return 0;
}

static void bwrap_close(session *s);
static void on_outbox_broken(void *data, int err);
static void on_answer_timer(uv_timer_t *t);

/* The loop's handles for HELLO, then exits, from the helper, and for what goes to it. Their data is the session. */
static void watch_sandbox(session *s, bwrap_state *st) {
  uv_loop_t *loop = provider_ctx()->loop;
  st->outbox = outbox_new(loop, st->control_fd, SEND_TIMEOUT_MS, on_outbox_broken, s);
  uv_timer_init(loop, &st->answer_timer);
  st->answer_timer.data = s;
  st->handles_open++;
  uv_poll_init(loop, &st->events_watch, st->events_fd);
  st->events_watch.data = s;
  uv_poll_start(&st->events_watch, UV_READABLE, on_events);
  st->watching = true;
  st->handles_open++;
  uv_timer_init(loop, &st->startup_timer);
  st->startup_timer.data = s;
  uv_timer_start(&st->startup_timer, on_startup_timeout, STARTUP_TIMEOUT_MS, 0);
  st->handles_open++;
  st->starting = true;
}

static void free_state(uv_handle_t *h);

/* HELLO came (or will not): the timer goes, and so does bwrap's stderr unless it went to the relay. */
static void stop_starting(bwrap_state *st) {
  if (!st->starting) return;
  st->starting = false;
  st->startup_timer.data = st;
  uv_close((uv_handle_t *)&st->startup_timer, free_state);
  if (st->err_fd >= 0) close(st->err_fd);
  st->err_fd = -1;
}

static int bwrap_open(session *s, failure *f) {
  const char *why;
  if (!bwrap_usable(&why))
    return fail(f, "unsupported", "bubblewrap sandboxes cannot run here: %s; the profile local/default "
                "works here, without isolation", why), -1;
  bwrap_state *st = calloc(1, sizeof *st);
  if (!st) abort();
  st->control_fd = st->events_fd = st->helper_pidfd = st->bwrap_pidfd = st->err_fd = -1;
  s->backend_data = st;
  if (check_binds(s->profile, f) < 0 || launch(s, st, f) < 0) {
    bwrap_close(s);   /* a failed open is not closed by its caller */
    return -1;
  }
  watch_sandbox(s, st);
  set_views(s);
  return 0;
}

/* ====================================================== start */

static size_t strings_size(char *const *v, size_t *count) {
  size_t total = 0;
  *count = 0;
  for (; v && v[*count]; (*count)++) total += strlen(v[*count]) + 1;
  return total;
}

static char *put_strings(char *out, char *const *v) {
  for (; v && *v; v++) out = stpcpy(out, *v) + 1;
  return out;
}

/* The START message for spec (malloc'ed, *len set), or NULL with -E2BIG when too large. */
static char *encode_start(const spawn_spec *spec, uint64_t tag, size_t *len) {
  size_t argc, envc;
  size_t size = sizeof(helper_start) + strings_size(spec->argv, &argc) + strings_size(spec->envp, &envc) +
                (spec->cwd ? strlen(spec->cwd) + 1 : 0);
  if (size > HELPER_MAX_MESSAGE) return NULL;
  char *msg = calloc(1, size);
  if (!msg) abort();
  helper_start *h = (helper_start *)msg;
  *h = (helper_start){.type = HELPER_START, .tag = tag, .argc = (uint32_t)argc,
                      .envc = (uint32_t)envc, .has_cwd = spec->cwd != NULL};
  h->fd_mask = (spec->fd_in >= 0 ? HELPER_HAS_STDIN : 0) | (spec->fd_out >= 0 ? HELPER_HAS_STDOUT : 0) |
               (spec->fd_err >= 0 ? HELPER_HAS_STDERR : 0);
  if (spec->limits) { h->limits = *spec->limits; h->has_limits = 1; }
  char *end = put_strings(put_strings(msg + sizeof *h, spec->argv), spec->envp);
  if (spec->cwd) strcpy(end, spec->cwd);
  *len = size;
  return msg;
}

static int send_start(bwrap_state *st, const spawn_spec *spec, uint64_t tag) {
  size_t len;
  char *msg = encode_start(spec, tag, &len);
  if (!msg) return -E2BIG;
  int fds[3], nfds = 0;
  if (spec->fd_in >= 0) fds[nfds++] = spec->fd_in;
  if (spec->fd_out >= 0) fds[nfds++] = spec->fd_out;
  if (spec->fd_err >= 0) fds[nfds++] = spec->fd_err;
  int rc = outbox_send(st->outbox, msg, len, fds, nfds);
  free(msg);
  return rc;
}

/*
** The sandbox cannot be used any more: its helper is stuck, or its
** channel broke (then the helper cannot be trusted to be in step). Its
** commands end as killed, on the next turn of the loop (not inside the
** start or signal that found it out), and the sandbox is ended: told at
** once, waited for on a job, so nothing of it is left while the provider
** serves every other session. Later starts fail with EPIPE.
*/
static void sandbox_unusable(session *s, bwrap_state *st, const char *why, int err) {
  if (st->broken) return;
  fprintf(stderr, "smolwf-provider: session %s: %s (%s): ending its sandbox and its commands\n", s->id, why,
          strerror(-err));
  st->broken = true;
  end_later(s, st);
  session_discard_sandbox(s);
  uv_timer_start(&st->answer_timer, on_answer_timer, 0, 0);
}

static void on_outbox_broken(void *data, int err) {
  session *s = data;
  const char *why = err == -ETIMEDOUT ? "the sandbox helper took no message for " STR(SEND_TIMEOUT_MS) " ms"
                                      : "the sandbox helper's control channel broke";
  sandbox_unusable(s, s->backend_data, why, err);
}

/* When the oldest unanswered SIGKILL is due (UINT64_MAX: none waits). */
static uint64_t kill_answer_due(const bwrap_state *st) {
  uint64_t due = UINT64_MAX;
  for (size_t i = 0; i < st->nrunning; i++)
    if (st->running[i].killed_at && st->running[i].killed_at + KILL_ANSWER_MS < due)
      due = st->running[i].killed_at + KILL_ANSWER_MS;
  return due;
}

static void arm_answer_timer(bwrap_state *st) {
  uint64_t due = kill_answer_due(st), now = uv_now(provider_ctx()->loop);
  if (due == UINT64_MAX) uv_timer_stop(&st->answer_timer);
  else uv_timer_start(&st->answer_timer, on_answer_timer, due > now ? due - now : 0, 0);
}

static void on_answer_timer(uv_timer_t *t) {
  session *s = t->data;
  bwrap_state *st = s->backend_data;
  if (st->broken) { helper_lost(st); return; }
  if (kill_answer_due(st) <= uv_now(provider_ctx()->loop))
    sandbox_unusable(s, st, "the sandbox helper reported no exit " STR(KILL_ANSWER_MS) " ms after a SIGKILL", -ETIMEDOUT);
  else
    arm_answer_timer(st);
}

/* A SIGKILL went out for tag: its EXITED is due within KILL_ANSWER_MS. */
static void expect_exit(bwrap_state *st, uint64_t tag) {
  for (size_t i = 0; i < st->nrunning; i++)
    if (st->running[i].tag == tag && !st->running[i].killed_at) st->running[i].killed_at = uv_now(provider_ctx()->loop);
  if (!uv_is_active((uv_handle_t *)&st->answer_timer)) arm_answer_timer(st);
}

/*
** No relay_sched_busy() here: the helper starts and reaps the command and
** counts it itself (relay_sched.h); the provider stays a pure relay.
*/
static int bwrap_start(session *s, proc *p, const spawn_spec *spec) {
  bwrap_state *st = s->backend_data;
  if (st->broken) return -EPIPE;
  int allowed = disk_watch_allows_start(s);
  if (allowed < 0) return allowed;
  uint64_t tag = ++st->next_tag;
  int rc = send_start(st, spec, tag);
  if (rc == -E2BIG || rc == -EMFILE || rc == -ENFILE) return rc;   /* not sent, and the channel is fine */
  if (rc < 0) {
    sandbox_unusable(s, st, "cannot send to the sandbox helper", rc);
    return rc;
  }
  p->pid = 1;   /* only a sign that it runs: its pid is the helper's to know (signals go by tag) */
  p->backend_data = (void *)(uintptr_t)tag;
  track(st, tag, p);
  disk_watch_changed(s, false);
  return 0;
}

/* ====================================================== signal, close */

/* Asks the helper to signal the command's group; after the sandbox ended there is none left. */
static int bwrap_signal(session *s, proc *p, int signo) {
  bwrap_state *st = s->backend_data;
  if (!st || st->broken) return 0;
  helper_reply m = {HELPER_SIGNAL, signo, (uint64_t)(uintptr_t)p->backend_data};
  int rc = outbox_send(st->outbox, &m, sizeof m, NULL, 0);
  if (rc < 0) sandbox_unusable(s, st, "cannot send to the sandbox helper", rc);
  else if (signo == SIGKILL) expect_exit(st, m.tag);
  return 0;   /* a sandbox that is ended ends the command too */
}

/*
** Ending the helper ends the namespace: the kernel kills every process in
** it (grandchildren and daemons included) before bwrap exits. Procs still
** running are the session's (procs_close_session) to forget, not ours.
*/
static void bwrap_close(session *s) {
  bwrap_state *st = s->backend_data;
  if (!st) return;
  s->backend_data = NULL;
  stop_starting(st);
  stderr_relay_stop(st->relay);
  st->relay = NULL;
  end_later(s, st);
  free(st->running);
  st->running = NULL;
  st->nrunning = 0;
  if (st->handles_open == 0) {
    release_fds(st);
    free(st);
    return;
  }
  /* libuv still refers to the fds: release them, and st, once the handles are closed. */
  stop_watching(st);
  st->events_watch.data = st;
  uv_close((uv_handle_t *)&st->events_watch, free_state);
  st->answer_timer.data = st;
  uv_close((uv_handle_t *)&st->answer_timer, free_state);
}

/* The bwrap process (our child): every process of the session descends from it. */
static pid_t bwrap_sandbox_pid(const session *s) {
  const bwrap_state *st = s->backend_data;
  return st && st->bwrap_pid > 0 ? st->bwrap_pid : 0;
}

const backend_ops backend_bwrap = {
  .isolation = "namespaces",
  .open = bwrap_open,
  .start = bwrap_start,
  .signal = bwrap_signal,
  .close = bwrap_close,
  .sandbox_pid = bwrap_sandbox_pid,
};
