/*
** Finding and ending the processes that left a local session's process
** groups (see strays.h). Processes are found by one walk of /proc; each
** is held by a pidfd opened before its stat is read, so a pid reused
** meanwhile is seen as the process it now names, and signals go through
** the pidfd, never to a reused number.
*/
#define _GNU_SOURCE
#include "strays.h"

#include "context.h"
#include "group_wait.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct proc_entry {
  pid_t pid, ppid, pgrp;
  int pidfd;
  int parent;              /* index of the parent's entry, or -1 */
  bool inside;             /* in the session: a group member, or a stray */
  bool stray;              /* inside, and outside the session's groups: ours to kill */
} proc_entry;

typedef struct proc_table {
  proc_entry *e;
  size_t n, cap;
} proc_table;

void strays_init(void) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

/* Whether the environment of pid holds exactly TMPDIR=tmpdir. */
static bool has_tmpdir(pid_t pid, const char *tmpdir) {
  char want[4096 + 8];
  int n = snprintf(want, sizeof want, "TMPDIR=%s", tmpdir);
  return n > 0 && (size_t)n < sizeof want && proc_env_has(pid, want, false);
}

static void table_free(proc_table *t) {
  for (size_t i = 0; i < t->n; i++) if (t->e[i].pidfd >= 0) close(t->e[i].pidfd);
  free(t->e);
}

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const proc_entry *)a)->pid, y = ((const proc_entry *)b)->pid;
  return (x > y) - (x < y);
}

static bool add_entry(pid_t pid, int pidfd, void *ctx) {
  proc_table *t = ctx;
  proc_entry e = {pid, 0, 0, pidfd, -1, false, false};
  if (!proc_running_stat(pid, &e.ppid, &e.pgrp)) return false;
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 256;
    proc_entry *grown = realloc(t->e, cap * sizeof *grown);
    if (!grown) return false;
    t->e = grown;
    t->cap = cap;
  }
  t->e[t->n++] = e;
  return true;
}

/* Every running process but ourselves, each with a pidfd and its parent's index. */
static void table_read(proc_table *t) {
  memset(t, 0, sizeof *t);
  proc_each(add_entry, t);
  if (t->n) qsort(t->e, t->n, sizeof *t->e, by_pid);
  for (size_t i = 0; i < t->n; i++) {
    proc_entry key = {.pid = t->e[i].ppid};
    proc_entry *parent = t->n ? bsearch(&key, t->e, t->n, sizeof *t->e, by_pid) : NULL;
    t->e[i].parent = parent ? (int)(parent - t->e) : -1;
  }
}

/* Everything below an inside process is inside; what is not in the groups is a stray. */
static void spread(proc_table *t, const pid_t *groups, size_t n) {
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < t->n; i++) {
      proc_entry *e = &t->e[i];
      if (e->inside || e->parent < 0 || !t->e[e->parent].inside) continue;
      e->inside = changed = true;
    }
  }
  for (size_t i = 0; i < t->n; i++) t->e[i].stray = t->e[i].inside && !groups_contain(groups, n, t->e[i].pgrp);
}

/* SIGKILLs the strays; hands back their pidfds (which the table lets go of) and pids. */
static void kill_strays_nowait(proc_table *t, stray_kills *out) {
  out->pidfds = calloc(t->n ? t->n : 1, sizeof *out->pidfds);
  out->pids = calloc(t->n ? t->n : 1, sizeof *out->pids);
  out->n = 0;
  for (size_t i = 0; out->pidfds && out->pids && i < t->n; i++) {
    proc_entry *e = &t->e[i];
    if (!e->stray) continue;
    syscall(SYS_pidfd_send_signal, e->pidfd, SIGKILL, NULL, 0);
    out->pidfds[out->n] = e->pidfd;
    out->pids[out->n++] = e->pid;
    e->pidfd = -1;   /* stray_kills_await closes it */
  }
}

size_t stray_kills_await(stray_kills *k, int timeout_ms) {
  size_t left = pidfds_await_gone(k->pidfds, k->n, timeout_ms);
  free(k->pidfds);
  k->pidfds = NULL;
  return left;
}

void stray_kills_reap(stray_kills *k) {
  /* A stray whose parent died is ours now (we are its subreaper): reap it. */
  for (size_t i = 0; i < k->n; i++) waitpid(k->pids[i], NULL, WNOHANG);
  free(k->pids);
  free(k->pidfds);
  *k = (stray_kills){0};
}

/* SIGKILLs the strays, waits for them to be gone, reaps those that are our children now. */
static size_t kill_strays(proc_table *t, int timeout_ms) {
  stray_kills k;
  kill_strays_nowait(t, &k);
  size_t left = stray_kills_await(&k, timeout_ms);
  stray_kills_reap(&k);
  return left;
}

/*
** Whether a stray can exist at all: a stray descends from a live group
** member, or was re-parented to us (then it is a child no backend owns).
** With no member left and no child at all, the /proc walk is skipped.
*/
static bool strays_possible(const pid_t *groups, size_t n) {
  if (groups_any_left(groups, n)) return true;
  siginfo_t si;
  si.si_pid = 0;
  return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0 || errno != ECHILD;
}

/* Marks in t the session's processes and, below them, its strays. */
static void find_session(proc_table *t, const pid_t *groups, size_t n, const char *tmpdir) {
  table_read(t);
  pid_t self = getpid();
  for (size_t i = 0; i < t->n; i++) {
    proc_entry *e = &t->e[i];
    e->inside = groups_contain(groups, n, e->pgrp);
    /* re-parented to us after its parent exited: the session's if it carries its TMPDIR */
    if (!e->inside && e->ppid == self && tmpdir) e->inside = has_tmpdir(e->pid, tmpdir);
  }
  spread(t, groups, n);
}

void strays_kill_session(const pid_t *groups, size_t n, const char *tmpdir, stray_kills *out) {
  *out = (stray_kills){0};
  if (!strays_possible(groups, n)) return;
  proc_table t;
  find_session(&t, groups, n, tmpdir);
  kill_strays_nowait(&t, out);
  table_free(&t);
}

size_t strays_kill_all(int timeout_ms) {
  proc_table t;
  table_read(&t);
  pid_t self = getpid();
  for (size_t i = 0; i < t.n; i++) t.e[i].inside = t.e[i].ppid == self;
  spread(&t, NULL, 0);
  size_t left = kill_strays(&t, timeout_ms);
  table_free(&t);
  return left;
}

/* Children owned by a backend (the context's part); few at a time, so a plain array. */
typedef struct strays {
  pid_t *owned;
  size_t n, cap;
} strays;

static strays *owners(void) {
  return CTX_PART(strays);
}

void strays_own(pid_t pid) {
  strays *o = owners();
  if (o->n == o->cap) {
    size_t cap = o->cap ? 2 * o->cap : 32;
    pid_t *grown = realloc(o->owned, cap * sizeof *grown);
    if (!grown) return;   /* then strays_reap may reap it first; its owner sees ECHILD */
    o->owned = grown;
    o->cap = cap;
  }
  o->owned[o->n++] = pid;
}

void strays_disown(pid_t pid) {
  strays *o = owners();
  for (size_t i = 0; i < o->n; i++)
    if (o->owned[i] == pid) { o->owned[i] = o->owned[--o->n]; break; }
}

static bool is_owned(pid_t pid) {
  const strays *o = owners();
  for (size_t i = 0; i < o->n; i++) if (o->owned[i] == pid) return true;
  return false;
}

void strays_free(void) {
  provider *ctx = provider_ctx();
  if (!ctx->strays) return;
  free(ctx->strays->owned);
  free(ctx->strays);
  ctx->strays = NULL;
}

void strays_reap(void) {
  for (;;) {
    siginfo_t si;
    si.si_pid = 0;
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0) return;
    /* the first child that exited is a backend's: it reaps it, and the rest wait for the next call */
    if (is_owned(si.si_pid)) return;
    waitpid(si.si_pid, NULL, WNOHANG);
  }
}
