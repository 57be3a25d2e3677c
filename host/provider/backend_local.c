/*
** The local backend: commands run as ordinary processes on the host, in
** the session's private directory (local/default, and auto/default where
** bubblewrap cannot run). Commands see host paths.
**
** A profile's disk allowance is checked as in bubblewrap sessions (disk_cap.h).
**
** Exits are watched with a pidfd per child (Linux 5.3+): no SIGCHLD
** handler, so nothing else in the provider can reap our children by
** accident, and a child is reaped even after its session is gone (its
** watcher then just forgets the proc). The pidfds sit in one epoll set of
** our own that the loop polls through a single handle (the reaper below).
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "context.h"
#include "disk_cap.h"
#include "errcodes.h"
#include "group_wait.h"
#include "process.h"
#include "relay_sched.h"
#include "session.h"
#include "strays.h"

typedef struct child_watch {
  int pidfd;
  pid_t pid;
  proc *p;                     /* NULL once the session was closed: only reap */
  struct child_watch *next;    /* in the session's list */
} child_watch;

typedef struct local_state {
  child_watch *children;
} local_state;

/*
** The reaper: every child's pidfd in one epoll set, which the loop polls
** through one uv_poll: one epoll_ctl to add a child and one to remove it,
** where a uv_poll per pidfd cost six epoll_ctl/ioctl calls per exec (libuv
** checks, arms, disarms and forgets each fd). The removal must be
** explicit: closing the pidfd is not enough while a just-started child
** still holds a copy of our fd table (vfork lets us run again before its
** exec closes the copies), and the set would then report a freed watch.
** It lives while local sessions are open or children are watched, so the
** loop can end.
*/
typedef struct reaper {
  uv_poll_t poll;
  int epfd;
  unsigned users;              /* open local sessions + watched children */
} reaper;

static void on_child_ready(child_watch *w);

static void on_reaper_ready(uv_poll_t *h, int status, int events) {
  (void)status; (void)events;
  struct epoll_event ready[32];
  int n = epoll_wait(((reaper *)h)->epfd, ready, 32, 0);
  for (int i = 0; i < n; i++) on_child_ready(ready[i].data.ptr);
  strays_reap();   /* processes re-parented to us that exited meanwhile (strays.h) */
}

static void free_reaper(uv_handle_t *h) {
  reaper *r = (reaper *)h;
  close(r->epfd);
  free(r);
}

/* The reaper (the context's part, while it lives). */
static reaper *the_reaper(void) {
  return provider_ctx()->reaper;
}

static int reaper_hold(void) {
  provider *ctx = provider_ctx();
  if (!ctx->reaper) {
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) return -errno;
    ctx->reaper = ctx_alloc(sizeof *ctx->reaper);
    ctx->reaper->epfd = epfd;
    uv_poll_init(ctx->loop, &ctx->reaper->poll, epfd);
    uv_poll_start(&ctx->reaper->poll, UV_READABLE, on_reaper_ready);
  }
  ctx->reaper->users++;
  return 0;
}

static void reaper_release(void) {
  provider *ctx = provider_ctx();
  if (--ctx->reaper->users > 0) return;
  uv_close((uv_handle_t *)&ctx->reaper->poll, free_reaper);
  ctx->reaper = NULL;
}

static void set_view(char **view, const char *host) {
  free(*view);
  *view = strdup(host);
}

/* A workspace that is the host tree itself: commands run in it, file operations start there. */
static bool use_host_tree(session *s, failure *f) {
  int fd = open(s->ws.host_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail_errno(f, errno, "open: workspace_sync.host_path", s->ws.host_path);
  close(s->workspace_fd);
  close(s->written_fd);
  s->workspace_fd = fd;
  s->written_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  set_view(&s->workspace_view, s->ws.host_path);
  return true;
}

static int local_open(session *s, failure *f) {
  set_view(&s->workspace_view, s->workspace_host);
  if (s->ws.kind == WORKSPACE_BIND && !use_host_tree(s, f)) return -1;
  int rc = reaper_hold();
  if (rc < 0) return fail(f, errno_code(-rc), "cannot watch processes: epoll_create1: %s", strerror(-rc)), -1;
  set_view(&s->tmp_view, s->tmp_host);
  s->backend_data = ctx_alloc(sizeof(local_state));
  return 1;
}

static void unlink_watch(session *s, child_watch *w) {
  local_state *st = s->backend_data;
  for (child_watch **pp = &st->children; *pp; pp = &(*pp)->next)
    if (*pp == w) { *pp = w->next; return; }
}

/*
** The exit goes to proc_exited first: an exec's result then leaves at
** once (see maybe_finish), and the watch's own cleanup, the scheduling
** switch and the group bookkeeping run while the host reads it.
*/
static void on_child_ready(child_watch *w) {
  int wstatus = 0;
  pid_t rc = waitpid(w->pid, &wstatus, WNOHANG);
  if (rc == 0 || (rc < 0 && errno == EINTR)) return;   /* not yet: poll again */
  if (rc < 0) wstatus = 0;   /* cannot happen for our own child; report a plain exit */
  proc *p = w->p;
  pid_t pid = w->pid;
  session *s = p ? p->session : NULL;   /* p may be forgotten by proc_exited */
  if (p) {
    unlink_watch(s, w);
    proc_exited(p, wstatus);
  }
  epoll_ctl(the_reaper()->epfd, EPOLL_CTL_DEL, w->pidfd, NULL);
  close(w->pidfd);
  strays_disown(pid);
  free(w);
  reaper_release();
  relay_sched_idle(&provider_ctx()->sched);
  if (!s) return;
  if (rc == pid) session_group_leader_reaped(s, pid);
  disk_watch_changed(s, true);
}

/*
** Drops groups whose leader we reaped and that no longer exist, so a long
** session does not grow its list, and those whose number now belongs to
** someone else (pids are reused quickly: pid_max is often 32768), so close
** never kills those. A group whose leader is not reaped yet is ours and
** exists: nothing to check.
*/
static void prune_groups(session *s) {
  size_t kept = 0;
  for (size_t i = 0; i < s->ngroups; i++) {
    pid_t g = s->groups[i];
    bool reaped = s->group_reaped[i];
    if (!reaped || ((kill(-g, 0) == 0 || errno != ESRCH) && group_still_ours(g))) {
      s->group_reaped[kept] = reaped;
      s->groups[kept++] = g;
    }
  }
  s->ngroups = kept;
}

static int watch_child(session *s, proc *p, pid_t pid) {
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) return -errno;
  child_watch *w = calloc(1, sizeof *w);
  if (!w) abort();
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
  if (epoll_ctl(the_reaper()->epfd, EPOLL_CTL_ADD, pidfd, &ev) < 0) {
    int err = errno;
    close(pidfd);
    free(w);
    return -err;
  }
  the_reaper()->users++;
  strays_own(pid);
  w->pidfd = pidfd;
  w->pid = pid;
  w->p = p;
  local_state *st = s->backend_data;
  w->next = st->children;
  st->children = w;
  p->backend_data = w;
  return 0;
}

static int local_start(session *s, proc *p, const spawn_spec *spec) {
  int allowed = disk_watch_allows_start(s);
  if (allowed < 0) return allowed;
  provider *ctx = provider_ctx();
  relay_sched_busy(&ctx->sched);   /* before the spawn: the command inherits SCHED_OTHER */
  pid_t pid = spawn_start(&ctx->spawn, spec);
  if (pid < 0) { relay_sched_idle(&ctx->sched); return pid; }
  int rc = watch_child(s, p, pid);
  if (rc < 0) {   /* no pidfd: we could never learn of its exit, so do not keep it */
    kill(-pid, SIGKILL);
    /* On the loop, but not waiting on anything it runs: a child killed before it could do anything dies at once. */
    waitpid(pid, NULL, 0);
    relay_sched_idle(&ctx->sched);
    return rc;
  }
  p->pid = pid;
  prune_groups(s);
  session_add_group(s, pid);
  disk_watch_changed(s, false);
  return 0;
}

static int local_signal(session *s, proc *p, int signo) {
  (void)s;
  if (kill(-p->pid, signo) == 0 || errno == ESRCH) return 0;
  return -errno;
}

/* SIGKILL is not instant: a dying process may hold its files and pipes for a moment. */
#define CLOSE_WAIT_MS 1000

/* What a close killed, waited for on the job that then removes the session's files (session.h's close_wait). */
typedef struct local_end {
  char *id;
  stray_kills strays;
  pid_t *groups;
  size_t ngroups;
} local_end;

/* On the removal's job: the killed are gone (or CLOSE_WAIT_MS passed for each kind). */
static void end_wait(void *data) {
  local_end *e = data;
  size_t strays = stray_kills_await(&e->strays, CLOSE_WAIT_MS);
  if (strays) fprintf(stderr, "smolwf-provider: session %s: %zu killed processes outside its groups still running after %d ms\n",
                      e->id, strays, CLOSE_WAIT_MS);
  size_t left = groups_await_gone(e->groups, e->ngroups, CLOSE_WAIT_MS);
  if (left) fprintf(stderr, "smolwf-provider: session %s: %zu killed processes still running after %d ms\n",
                    e->id, left, CLOSE_WAIT_MS);
}

/* Back on the loop, before the close is answered: our children among the killed are reaped. */
static void end_done(void *data) {
  local_end *e = data;
  stray_kills_reap(&e->strays);
  reaper *r = the_reaper();
  if (r) on_reaper_ready(&r->poll, 0, 0);   /* the watchers of children that died meanwhile reap them */
  else strays_reap();
  free(e->id);
  free(e->groups);
  free(e);
}

/*
** Kills every group the session ever started (grandchildren left behind
** by an exited command included) and what left them; the wait until they
** are gone, with our own children reaped, is the session's close_wait, so
** that `close` answers only when nothing of the session runs while the
** loop waits for none of it. The watchers stay, without the proc, to reap
** each child when it dies and close their pidfds.
*/
static void local_close(session *s) {
  prune_groups(s);
  local_end *e = calloc(1, sizeof *e);
  if (!e) abort();
  e->id = strdup(s->id);
  /*
  ** First, while their parents still link them to the session. One walk
  ** of /proc on the loop (a snapshot must be taken before the groups die;
  ** ~1 ms per 1000 processes of the host), skipped when no stray can exist.
  */
  strays_kill_session(s->groups, s->ngroups, s->tmp_host, &e->strays);
  for (size_t i = 0; i < s->ngroups; i++) kill(-s->groups[i], SIGKILL);
  e->groups = malloc((s->ngroups ? s->ngroups : 1) * sizeof *e->groups);
  if (!e->groups) abort();
  if (s->ngroups) memcpy(e->groups, s->groups, s->ngroups * sizeof *e->groups);   /* s->groups is NULL before the first */
  e->ngroups = s->ngroups;
  s->close_wait = end_wait;
  s->close_done = end_done;
  s->close_data = e;
  local_state *st = s->backend_data;
  if (!st) return;
  for (child_watch *w = st->children; w; w = w->next) w->p = NULL;
  free(st);
  s->backend_data = NULL;
  reaper_release();
}

const backend_ops backend_local = {
  .isolation = "none",
  .open = local_open,
  .start = local_start,
  .signal = local_signal,
  .close = local_close,
};
