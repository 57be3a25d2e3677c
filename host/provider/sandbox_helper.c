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

#include <errno.h>
#include <fcntl.h>
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

/* Commands started and not reaped yet; exits of other pids are orphans, reaped silently. */
static child *children;
static size_t nchildren, children_cap;

/* Groups of reaped commands that still have members, for SIGNAL. */
static child *ended;
static size_t nended, ended_cap;

/* EXITED reports the provider has not taken yet (the events socket was full). */
static helper_reply *pending;
static size_t npending, pending_cap;

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

static int send_with_fd(int sock, const void *msg, size_t len, int fd) {
  union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } ctl;
  struct iovec iov = {(void *)msg, len};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  ssize_t n;
  do n = sendmsg(sock, &mh, MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
  return n < 0 ? -errno : 0;
}

static void queue_exit(uint64_t tag, int status) {
  if (npending == pending_cap) pending = grow(pending, &pending_cap, sizeof *pending);
  pending[npending++] = (helper_reply){HELPER_EXITED, status, tag};
}

/* Sends queued EXITED reports until the socket is full; the provider may read slowly. */
static void flush_exits(void) {
  size_t sent = 0;
  while (sent < npending) {
    int rc = send_with_fd(HELPER_EVENTS_FD, &pending[sent], sizeof *pending, -1);
    if (rc == -EAGAIN) break;
    if (rc < 0) { errno = -rc; die("events channel"); }
    sent++;
  }
  memmove(pending, pending + sent, (npending - sent) * sizeof *pending);
  npending -= sent;
}

/* ====================================================== reaping */

static bool group_exists(pid_t pgid) {
  return kill(-pgid, 0) == 0 || errno != ESRCH;
}

static void record_child(pid_t pid, uint64_t tag) {
  if (nchildren == children_cap) children = grow(children, &children_cap, sizeof *children);
  children[nchildren++] = (child){pid, tag};
}

/*
** A reaped command's group stays signalable while it has members. Groups
** that emptied are dropped here, at each reap, so the list stays short and
** a later group reusing the number is never taken for one of them.
*/
static void keep_group(child c) {
  size_t kept = 0;
  for (size_t i = 0; i < nended; i++)
    if (group_exists(ended[i].pid)) ended[kept++] = ended[i];
  nended = kept;
  if (!group_exists(c.pid)) return;
  if (nended == ended_cap) ended = grow(ended, &ended_cap, sizeof *ended);
  ended[nended++] = c;
}

static void reaped(pid_t pid, int status) {
  for (size_t i = 0; i < nchildren; i++) {
    if (children[i].pid == pid) {
      child c = children[i];
      children[i] = children[--nchildren];
      queue_exit(c.tag, status);
      keep_group(c);
      relay_sched_idle();
      return;
    }
  }
}

static void reap_all(int sigfd) {
  struct signalfd_siginfo si;
  while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {}   /* drain: one reap covers all */
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) reaped(pid, status);
  flush_exits();
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

/* STARTED: the command's pid (recorded first, so its exit is matched) or -errno. */
static void reply_started(uint64_t tag, pid_t pid) {
  if (pid > 0) record_child(pid, tag);
  helper_reply r = {HELPER_STARTED, pid, tag};
  int rc = send_with_fd(HELPER_CONTROL_FD, &r, sizeof r, -1);
  if (rc < 0) { errno = -rc; die("control channel"); }
}

/* SIGNAL: to the command's process group, running or reaped with members left. */
static void handle_signal(const helper_reply *m) {
  for (size_t i = 0; i < nchildren; i++)
    if (children[i].tag == m->tag) { kill(-children[i].pid, m->value); return; }
  for (size_t i = 0; i < nended; i++)
    if (ended[i].tag == m->tag) { kill(-ended[i].pid, m->value); return; }
}

static void handle_start(char *msg, size_t len, int *fds, int nfds) {
  static char *vec[HELPER_MAX_MESSAGE + 2];
  spawn_spec spec;
  uint64_t tag = len >= sizeof(helper_start) ? ((helper_start *)msg)->tag : 0;
  pid_t pid = -EPROTO;
  if (decode_start(msg, len, fds, nfds, &spec, vec)) {
    relay_sched_busy();   /* before the spawn: the command inherits SCHED_OTHER */
    pid = spawn_start(&spec);
    if (pid < 0) relay_sched_idle();
  }
  for (int i = 0; i < nfds; i++) close(fds[i]);
  reply_started(tag, pid);
}

/* Takes every waiting request; returns false at end of file (the session is closing). */
static bool serve_control(void) {
  static _Alignas(helper_start) char msg[HELPER_MAX_MESSAGE];
  for (;;) {
    int fds[3], nfds;
    ssize_t n = recv_message(HELPER_CONTROL_FD, msg, sizeof msg, fds, &nfds);
    if (n == 0) return false;
    if (n < 0 && errno == EAGAIN) return true;
    if (n < 0 && errno != EMSGSIZE) die("control channel");
    const helper_reply *m = (const helper_reply *)msg;
    if (n == (ssize_t)sizeof *m && m->type == HELPER_SIGNAL) {
      for (int i = 0; i < nfds; i++) close(fds[i]);
      handle_signal(m);
      continue;
    }
    handle_start(msg, n < 0 ? 0 : (size_t)n, fds, nfds);
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

static void say_hello(void) {
  helper_reply hello = {HELPER_HELLO, 0, helper_build_id()};
  int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
  if (self < 0) die("pidfd_open");
  int rc = send_with_fd(HELPER_EVENTS_FD, &hello, sizeof hello, self);
  close(self);
  if (rc < 0) { errno = -rc; die("events channel"); }
}

static void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) die("channel fd");
}

int sandbox_helper_main(int argc, char **argv) {
  (void)argv;
  if (argc != 2 || getpid() != 1) {
    fprintf(stderr, "smolwf-provider helper: runs only inside a bubblewrap session\n");
    return 2;
  }
  prctl(PR_SET_DUMPABLE, 0);
  relay_sched_enter();
  int sigfd = setup_signals();
  set_nonblocking(HELPER_CONTROL_FD);
  set_nonblocking(HELPER_EVENTS_FD);
  say_hello();
  for (;;) {
    struct pollfd p[3] = {{HELPER_CONTROL_FD, POLLIN, 0}, {sigfd, POLLIN, 0},
                          {HELPER_EVENTS_FD, npending ? POLLOUT : 0, 0}};
    if (poll(p, 3, -1) < 0 && errno != EINTR) die("poll");
    if (p[1].revents) reap_all(sigfd);
    if (p[2].revents & (POLLHUP | POLLERR)) _exit(0);   /* the provider is gone */
    if (p[2].revents & POLLOUT) flush_exits();
    if ((p[0].revents & (POLLIN | POLLHUP)) && !serve_control()) _exit(0);
  }
}
