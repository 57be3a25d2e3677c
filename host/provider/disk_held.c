/*
** Unnamed files the session's processes hold (see disk_held.h).
*/
#define _GNU_SOURCE
#include "disk_held.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group_wait.h"

typedef enum { UNKNOWN, MEMBER, OUTSIDER } membership;

typedef struct proc_row {
  pid_t pid, ppid, pgrp;
  membership member;
} proc_row;

typedef struct proc_table {
  proc_row *rows;
  size_t n, cap;
} proc_table;

void disk_procs_free(disk_procs *who) {
  free(who->groups);
  free(who->env);
  *who = (disk_procs){0};
}

static void add_row(proc_table *t, proc_row r) {
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 256;
    t->rows = realloc(t->rows, t->cap * sizeof *t->rows);
    if (!t->rows) abort();
  }
  t->rows[t->n++] = r;
}

static bool directly_member(const disk_procs *who, const proc_row *r) {
  return r->pid == who->sandbox || groups_contain(who->groups, who->ngroups, r->pgrp) ||
         (who->env && proc_env_has(r->pid, who->env, false));
}

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const proc_row *)a)->pid, y = ((const proc_row *)b)->pid;
  return (x > y) - (x < y);
}

static proc_row *find_row(proc_table *t, pid_t pid) {
  proc_row key = {.pid = pid};
  return bsearch(&key, t->rows, t->n, sizeof *t->rows, by_pid);
}

/*
** A process descending from a member is one: climbs r's ancestors until
** one is known (or the chain leaves the table), then marks the whole
** climb. Each row is settled once, so the table costs n log n.
*/
static void settle(proc_table *t, proc_row *r) {
  membership found = OUTSIDER;
  for (proc_row *up = r; up; up = up->ppid != up->pid ? find_row(t, up->ppid) : NULL) {
    if (up->member != UNKNOWN) { found = up->member; break; }
    up->member = OUTSIDER;   /* for now: also ends a loop of reused pids */
  }
  if (found == MEMBER)
    for (proc_row *up = r; up && up->member == OUTSIDER; up = find_row(t, up->ppid)) up->member = MEMBER;
}

typedef struct table_read {
  proc_table *t;
  const disk_procs *who;
} table_read;

static bool add_process(pid_t pid, int pidfd, void *data) {
  (void)pidfd;   /* the row is read through /proc: a pid reused meanwhile is read as what it now names */
  table_read *tr = data;
  proc_row r = {.pid = pid};
  if (!proc_running_stat(pid, &r.ppid, &r.pgrp)) return false;
  r.member = directly_member(tr->who, &r) ? MEMBER : UNKNOWN;
  add_row(tr->t, r);
  return false;
}

/* Every running process, marked when it is the session's (descendants of members included). */
static void read_table(proc_table *t, const disk_procs *who) {
  proc_each(add_process, &(table_read){t, who});
  if (t->n) qsort(t->rows, t->n, sizeof *t->rows, by_pid);
  for (size_t i = 0; i < t->n; i++) settle(t, &t->rows[i]);
}

static bool on_devs(dev_t dev, const dev_t *devs, size_t ndevs) {
  for (size_t i = 0; i < ndevs; i++)
    if (devs[i] == dev) return true;
  return false;
}

/* The kernel's PF_EXITING (include/linux/sched.h), in the flags of /proc/PID/task/TID/stat. */
#define TASK_EXITING 0x4u

/*
** Whether the thread has begun to exit. Its memory goes first, and from
** then on a provider that is not root may not read its descriptors; it can
** write nothing more, and what it holds is released within moments.
*/
static bool task_exiting(const char *task_dir) {
  char path[320];
  snprintf(path, sizeof path, "%s/stat", task_dir);
  proc_stat st;
  if (!proc_read_stat(path, &st)) return true;   /* gone */
  return st.state == 'Z' || st.state == 'X' || (st.flags & TASK_EXITING);
}

/*
** Whether the thread is pid 1 of a namespace below ours: in a bubblewrap
** session, the sandbox helper. It makes itself non-dumpable (so a provider
** that is not root may not read its descriptors) and holds no file of a
** command: it opens none for them and closes the pipes it passes on.
*/
static bool namespace_init(const char *task_dir) {
  char path[320], line[256];
  snprintf(path, sizeof path, "%s/status", task_dir);
  FILE *f = fopen(path, "re");
  if (!f) return false;
  bool init = false;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "NSpid:", 6) != 0) continue;
    const char *last = strrchr(line, '\t');
    init = last && last != strchr(line, '\t') && strtol(last + 1, NULL, 10) == 1;
    break;
  }
  fclose(f);
  return init;
}

/*
** A table the provider may not read hides files, unless its thread is
** exiting or is the helper of the session's sandbox (sandboxed: only there
** may a pid 1 below ours be trusted; in a local session a command could
** make one).
*/
static bool hides(const char *task_dir, bool sandboxed) {
  return !task_exiting(task_dir) && !(sandboxed && namespace_init(task_dir));
}

/* Counts the unnamed files of one thread's descriptor table (task_dir: /proc/PID/task/TID). */
static void count_table(disk_tally *t, const char *task_dir, bool sandboxed, const dev_t *devs, size_t ndevs) {
  char path[320];
  snprintf(path, sizeof path, "%s/fd", task_dir);
  DIR *d = opendir(path);
  if (!d && (errno == EACCES || errno == EPERM) && hides(task_dir, sandboxed)) t->hidden++;
  if (!d) return;   /* else gone meanwhile */
  for (struct dirent *e; !disk_tally_done(t) && (e = readdir(d));) {
    struct stat st;
    if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, 0) < 0) continue;
    if (S_ISREG(st.st_mode) && st.st_nlink == 0 && on_devs(st.st_dev, devs, ndevs)) disk_tally_add(t, &st);
  }
  closedir(d);
}

static void count_process(disk_tally *t, pid_t pid, bool sandboxed, const dev_t *devs, size_t ndevs) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
  DIR *d = opendir(path);
  if (!d) return;
  for (struct dirent *e; !disk_tally_done(t) && (e = readdir(d));) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    char task_dir[300];
    snprintf(task_dir, sizeof task_dir, "/proc/%ld/task/%s", (long)pid, e->d_name);
    count_table(t, task_dir, sandboxed, devs, ndevs);
  }
  closedir(d);
}

void disk_count_held(disk_tally *t, const disk_procs *who, const dev_t *devs, size_t ndevs) {
  if (!who->ngroups && !who->sandbox && !who->env) return;
  proc_table table = {0};
  read_table(&table, who);
  for (size_t i = 0; i < table.n && !disk_tally_done(t); i++)
    if (table.rows[i].member == MEMBER) count_process(t, table.rows[i].pid, who->sandbox != 0, devs, ndevs);
  free(table.rows);
}
