/*
** The in-sandbox helper (see sandbox_helper.h for the channel). It is pid 1
** of the session's pid namespace: it starts commands on request, reaps
** every process of the namespace (orphans land here too) and reports the
** exits of the commands it started. It is single-threaded and blocks only
** in poll().
**
** Being pid 1 also shields it: the kernel drops signals that processes of
** the namespace send it, and it makes itself non-dumpable so commands (same
** uid, no capabilities) cannot ptrace it.
*/
#define _GNU_SOURCE
#include "relay_sched.h"
#include "sandbox_helper.h"
#include "sandbox_mount.h"
#include "bwrap_args.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct child {
  pid_t pid;               /* also its process group */
  uint64_t tag;
} child;

/* The helper's whole state (it is a program of its own: the provider's context is not here). */
typedef struct helper {
  /* Commands started and not reaped yet; exits of other pids are orphans, reaped silently. */
  child *children;
  size_t nchildren, children_cap;
  /* Groups of reaped commands that still have members, for SIGNAL. */
  child *ended;
  size_t nended, ended_cap;
  /* EXITED reports the provider has not taken yet (the events socket was full). */
  helper_reply *pending;
  size_t npending, pending_cap;
  relay_sched sched;
  spawn_setup spawn;
  /* One START at a time: its message, and the argv + envp vector made from it. */
  _Alignas(helper_start) char msg[HELPER_MAX_MESSAGE];
  char *vec[HELPER_MAX_MESSAGE + 2];
} helper;

static void die(const char *what) {
  fprintf(stderr, "smolwf-provider helper: %s: %s\n", what, strerror(errno));
  _exit(1);   /* _exit: no atexit work (nor a leak check) in a dying sandbox */
}

static void *grow(void *array, size_t *cap, size_t elem) {
  size_t ncap = *cap ? *cap * 2 : 16;
  void *p = realloc(array, ncap * elem);
  if (!p) die("out of memory");
  *cap = ncap;
  return p;
}

/* ====================================================== sending */

int helper_send(int sock, const void *msg, size_t len, const int *fds, int nfds, int flags) {
  union { struct cmsghdr h; char buf[CMSG_SPACE(3 * sizeof(int))]; } ctl;
  struct iovec iov = {(void *)msg, len};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds > 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
  }
  ssize_t n;
  do n = sendmsg(sock, &mh, MSG_NOSIGNAL | flags); while (n < 0 && errno == EINTR);
  return n < 0 ? -errno : 0;
}

/* EXITED (or FAILED) for tag, sent when the events socket takes it. */
static void queue_report(helper *h, uint32_t type, uint64_t tag, int value) {
  if (h->npending == h->pending_cap) h->pending = grow(h->pending, &h->pending_cap, sizeof *h->pending);
  h->pending[h->npending++] = (helper_reply){type, value, tag};
}

/* Sends queued EXITED reports until the socket is full; the provider may read slowly. */
static void flush_exits(helper *h) {
  size_t sent = 0;
  while (sent < h->npending) {
    int rc = helper_send(HELPER_EVENTS_FD, &h->pending[sent], sizeof *h->pending, NULL, 0, 0);
    if (rc == -EAGAIN) break;
    if (rc < 0) { errno = -rc; die("events channel"); }
    sent++;
  }
  if (sent == 0) return;   /* also when nothing was ever queued: pending is still NULL */
  memmove(h->pending, h->pending + sent, (h->npending - sent) * sizeof *h->pending);
  h->npending -= sent;
}

/* ====================================================== reaping */

static bool group_exists(pid_t pgid) {
  return kill(-pgid, 0) == 0 || errno != ESRCH;
}

static void record_child(helper *h, pid_t pid, uint64_t tag) {
  if (h->nchildren == h->children_cap) h->children = grow(h->children, &h->children_cap, sizeof *h->children);
  h->children[h->nchildren++] = (child){pid, tag};
}

/*
** A reaped command's group stays signalable while it has members. Groups
** that emptied are dropped here, at each reap, so the list stays short and
** a later group reusing the number is never taken for one of them.
*/
static void keep_group(helper *h, child c) {
  size_t kept = 0;
  for (size_t i = 0; i < h->nended; i++)
    if (group_exists(h->ended[i].pid)) h->ended[kept++] = h->ended[i];
  h->nended = kept;
  if (!group_exists(c.pid)) return;
  if (h->nended == h->ended_cap) h->ended = grow(h->ended, &h->ended_cap, sizeof *h->ended);
  h->ended[h->nended++] = c;
}

static void reaped(helper *h, pid_t pid, int status) {
  for (size_t i = 0; i < h->nchildren; i++) {
    if (h->children[i].pid == pid) {
      child c = h->children[i];
      h->children[i] = h->children[--h->nchildren];
      queue_report(h, HELPER_EXITED, c.tag, status);
      flush_exits(h);   /* the provider learns of the exit before our bookkeeping */
      keep_group(h, c);
      relay_sched_idle(&h->sched);
      return;
    }
  }
}

static void reap_all(helper *h, int sigfd) {
  struct signalfd_siginfo si;
  /*
  ** SIGCHLD is a standard signal: however many children exited, at most
  ** one is pending, so one read takes it and the reap below covers them all.
  */
  if (read(sigfd, &si, sizeof si) < 0 && errno != EAGAIN && errno != EINTR) die("signalfd");
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) reaped(h, pid, status);
  flush_exits(h);
}

/* ====================================================== receiving a START */

/* Reads one message and its SCM_RIGHTS fds (close-on-exec). Returns its length, 0 at EOF. */
static ssize_t recv_message(int sock, void *buf, size_t len, int *fds, int *nfds) {
  union { struct cmsghdr h; char buf[CMSG_SPACE(3 * sizeof(int))]; } ctl;
  struct iovec iov = {buf, len};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                      .msg_controllen = sizeof ctl.buf};
  ssize_t n;
  do n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC); while (n < 0 && errno == EINTR);
  *nfds = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); n >= 0 && c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    if (count > 3 - *nfds) count = 3 - *nfds;   /* never more than the buffer holds */
    memcpy(fds + *nfds, CMSG_DATA(c), (size_t)count * sizeof(int));
    *nfds += count;
  }
  if (n >= 0 && (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    errno = EMSGSIZE;
    return -1;
  }
  return n;
}

/* Splits the strings after the header into argv, envp and cwd; false if they do not fit exactly. */
static bool unpack_strings(const helper_start *h, char *strings, size_t len, char **vec,
                           const char **cwd) {
  size_t want = (size_t)h->argc + h->envc + (h->has_cwd ? 1 : 0), got = 0, pos = 0;
  while (pos < len && got < want) {
    char *end = memchr(strings + pos, '\0', len - pos);
    if (!end) return false;
    vec[got++] = strings + pos;
    pos = (size_t)(end - strings) + 1;
  }
  if (got != want || pos != len || h->argc == 0) return false;
  *cwd = h->has_cwd ? vec[want - 1] : NULL;
  memmove(vec + h->argc + 1, vec + h->argc, h->envc * sizeof *vec);   /* NULL after argv */
  vec[h->argc] = NULL;
  vec[h->argc + 1 + h->envc] = NULL;
  return true;
}

/* Builds the spawn_spec from the message and its fds. */
static bool decode_start(char *msg, size_t len, const int *fds, int nfds, spawn_spec *spec,
                         char **vec) {
  helper_start *h = (helper_start *)msg;
  if (len < sizeof *h || h->type != HELPER_START) return false;
  if (nfds != __builtin_popcount(h->fd_mask & 7u)) return false;
  /* Every string takes at least its NUL, so this bounds the vector too. */
  if ((uint64_t)h->argc + h->envc + 1 > len - sizeof *h) return false;
  const char *cwd;
  if (!unpack_strings(h, msg + sizeof *h, len - sizeof *h, vec, &cwd)) return false;
  int next = 0;
  spec->fd_in = (h->fd_mask & HELPER_HAS_STDIN) ? fds[next++] : -1;
  spec->fd_out = (h->fd_mask & HELPER_HAS_STDOUT) ? fds[next++] : -1;
  spec->fd_err = (h->fd_mask & HELPER_HAS_STDERR) ? fds[next++] : -1;
  spec->argv = vec;
  spec->envp = vec + h->argc + 1;
  spec->cwd = cwd;
  spec->limits = h->has_limits ? &h->limits : NULL;
  return true;
}

/* ====================================================== handling a START */

/* A started command is recorded, so its exit is matched; one that could not start is reported. */
static void started(helper *h, uint64_t tag, pid_t pid) {
  if (pid > 0) record_child(h, pid, tag);
  else queue_report(h, HELPER_FAILED, tag, pid);
}

/* SIGNAL: to the command's process group, running or reaped with members left. */
static void handle_signal(const helper *h, const helper_reply *m) {
  for (size_t i = 0; i < h->nchildren; i++)
    if (h->children[i].tag == m->tag) { kill(-h->children[i].pid, m->value); return; }
  for (size_t i = 0; i < h->nended; i++)
    if (h->ended[i].tag == m->tag) { kill(-h->ended[i].pid, m->value); return; }
}

static void handle_start(helper *h, size_t len, int *fds, int nfds) {
  spawn_spec spec;
  uint64_t tag = len >= sizeof(helper_start) ? ((helper_start *)h->msg)->tag : 0;
  pid_t pid = -EPROTO;
  if (decode_start(h->msg, len, fds, nfds, &spec, h->vec)) {
    relay_sched_busy(&h->sched);   /* before the spawn: the command inherits SCHED_OTHER */
    pid = spawn_start(&h->spawn, &spec);
    if (pid < 0) relay_sched_idle(&h->sched);
  }
  for (int i = 0; i < nfds; i++) close(fds[i]);
  started(h, tag, pid);
}

/* Takes every waiting request; returns false at end of file (the session is closing). */
static bool serve_control(helper *h) {
  for (;;) {
    int fds[3], nfds;
    ssize_t n = recv_message(HELPER_CONTROL_FD, h->msg, sizeof h->msg, fds, &nfds);
    if (n == 0) return false;
    if (n < 0 && errno == EAGAIN) return true;
    if (n < 0 && errno != EMSGSIZE) die("control channel");
    const helper_reply *m = (const helper_reply *)h->msg;
    if (n == (ssize_t)sizeof *m && m->type == HELPER_SIGNAL) {
      for (int i = 0; i < nfds; i++) close(fds[i]);
      handle_signal(h, m);
      continue;
    }
    handle_start(h, n < 0 ? 0 : (size_t)n, fds, nfds);
  }
}

/* ====================================================== main */

static int setup_signals(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &set, NULL) < 0) die("sigprocmask");
  signal(SIGPIPE, SIG_IGN);   /* a closed channel shows up as EPIPE, handled where it happens */
  int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) die("signalfd");
  return fd;
}

uint64_t helper_build_id(void) {
  static const char stamp[] = __DATE__ " " __TIME__;   /* differs between builds */
  uint64_t h = 1469598103934665603ull ^ sizeof(helper_start) ^ ((uint64_t)sizeof(limits) << 32);
  for (const char *c = stamp; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return h;
}

/*
** HELLO: the build id, how the workspace was mounted (value: 0 an overlay,
** -errno an overlay the kernel refused, 1 no overlay asked for), a pidfd
** of the helper, and the workspace as mounted here (O_PATH), where the
** provider's file operations start so that they see what commands see.
*/
static void say_hello(int mounted) {
  helper_reply hello = {HELPER_HELLO, mounted, helper_build_id()};
  int fds[2] = {(int)syscall(SYS_pidfd_open, getpid(), 0), open(SANDBOX_WORKSPACE, O_PATH | O_DIRECTORY | O_CLOEXEC)};
  if (fds[0] < 0) die("pidfd_open");
  if (fds[1] < 0) die(SANDBOX_WORKSPACE);
  int rc = helper_send(HELPER_EVENTS_FD, &hello, sizeof hello, fds, 2, 0);
  close(fds[0]);
  close(fds[1]);
  if (rc < 0) { errno = -rc; die("events channel"); }
}

/*
** `helper` or `helper overlay UID GID [refuse]`: the second mounts the
** workspace (sandbox_mount.h), then becomes UID/GID without privileges.
** Returns what HELLO says about the mount, or INT_MIN on a usage error.
*/
static int prepare_workspace(int argc, char **argv) {
  if (argc == 2) return 1;
  if ((argc != 5 && argc != 6) || strcmp(argv[2], "overlay") != 0) return INT_MIN;
  if (argc == 6 && strcmp(argv[5], "refuse") != 0) return INT_MIN;
  int mounted = sandbox_mount_workspace(argc == 6);
  sandbox_drop_privileges((uid_t)strtoul(argv[3], NULL, 10), (gid_t)strtoul(argv[4], NULL, 10));
  return mounted;
}

static void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) die("channel fd");
}

int sandbox_helper_main(int argc, char **argv) {
  int mounted = getpid() == 1 ? prepare_workspace(argc, argv) : INT_MIN;
  if (mounted == INT_MIN) {
    fprintf(stderr, "smolwf-provider helper: runs only inside a bubblewrap session\n");
    return 2;
  }
  prctl(PR_SET_DUMPABLE, 0);
  helper *h = calloc(1, sizeof *h);   /* lives until _exit */
  if (!h) die("out of memory");
  relay_sched_enter(&h->sched);
  spawn_setup_init(&h->spawn, &h->sched);
  int sigfd = setup_signals();
  set_nonblocking(HELPER_CONTROL_FD);
  set_nonblocking(HELPER_EVENTS_FD);
  say_hello(mounted);
  for (;;) {
    struct pollfd p[3] = {{HELPER_CONTROL_FD, POLLIN, 0}, {sigfd, POLLIN, 0},
                          {HELPER_EVENTS_FD, h->npending ? POLLOUT : 0, 0}};
    if (poll(p, 3, -1) < 0 && errno != EINTR) die("poll");
    if (p[1].revents) reap_all(h, sigfd);
    if (p[2].revents & (POLLHUP | POLLERR)) _exit(0);   /* the provider is gone */
    if (p[2].revents & POLLOUT) flush_exits(h);
    if ((p[0].revents & (POLLIN | POLLHUP)) && !serve_control(h)) _exit(0);
  }
}
