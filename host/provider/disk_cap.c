/*
** Measuring a session's disk use off the loop, and acting on it (see
** disk_cap.h for the policy).
*/
#define _GNU_SOURCE
#include "disk_cap.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context.h"
#include "disk_held.h"
#include "disk_walk.h"
#include "job.h"
#include "process.h"
#include "session.h"

/* Files take whole blocks: what is written is counted, and what is left is given, in these. */
#define BLOCK 4096u

/* A measure may stop counting past this many times a cap: the figure is then "at least" (partial). */
#define STOP_FACTOR 2

uint64_t disk_usage(const session *s, uint64_t limit) {
  disk_tally t;
  disk_tally_init(&t, limit, 0, NULL);
  dev_t dev;
  if (s->written_fd >= 0) disk_walk_area(&t, s->written_fd, &dev);
  if (s->tmp_fd >= 0 && !disk_tally_done(&t)) disk_walk_area(&t, s->tmp_fd, &dev);
  disk_tally_free(&t);
  return t.bytes;
}

/* ===== one measure, on a job's thread ===== */

/* What a measure works on: copies, so that it needs nothing of the session (which may close meanwhile). */
typedef struct measure {
  struct disk_watch *watch;   /* the loop's side only */
  int areas[2];               /* the session's written part and tmp (dups) */
  int view_fd;                /* the workspace as commands see it (dup; its filesystem holds their files), or -1 */
  disk_procs who;
  uint64_t stop_bytes, stop_inodes;
  uint64_t bytes, inodes;     /* the figure */
  uint64_t hidden;            /* processes whose open files could not be read */
  bool partial;               /* counting stopped early: at least this much */
  unsigned pace_ms;           /* $SMOLWF_PROVIDER_DISK_PACE_MS: a pause in each directory (a test seam) */
} measure;

static void measure_work(job *j) {
  measure *m = j->data;
  disk_tally t;
  disk_tally_init(&t, m->stop_bytes, m->stop_inodes, j);
  t.pace_ms = m->pace_ms;
  dev_t devs[3];
  size_t ndevs = 0;
  for (int i = 0; i < 2; i++)
    if (m->areas[i] >= 0 && !disk_tally_done(&t)) disk_walk_area(&t, m->areas[i], &devs[ndevs++]);
  struct stat st;
  if (m->view_fd >= 0 && fstat(m->view_fd, &st) == 0) devs[ndevs++] = st.st_dev;
  if (!disk_tally_done(&t)) disk_count_held(&t, &m->who, devs, ndevs);
  m->bytes = t.bytes;
  m->inodes = t.inodes;
  m->hidden = t.hidden;
  m->partial = disk_tally_done(&t);
  disk_tally_free(&t);
}

static int dup_fd(int fd) {
  return fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

/* The session's processes, as /proc will show them to the measure. */
static void snapshot_procs(const session *s, disk_procs *who) {
  if (s->backend->sandbox_pid) {
    who->sandbox = s->backend->sandbox_pid(s);
    return;
  }
  if (s->ngroups) {
    who->groups = malloc(s->ngroups * sizeof *who->groups);
    if (!who->groups) abort();
    memcpy(who->groups, s->groups, s->ngroups * sizeof *who->groups);
    who->ngroups = s->ngroups;
  }
  if (s->tmp_view && asprintf(&who->env, "TMPDIR=%s", s->tmp_view) < 0) abort();
}

static measure *measure_new(const session *s) {
  measure *m = calloc(1, sizeof *m);
  if (!m) abort();
  m->areas[0] = dup_fd(s->written_fd);
  m->areas[1] = dup_fd(s->tmp_fd);
  m->view_fd = s->workspace_fd != s->written_fd ? dup_fd(s->workspace_fd) : -1;
  snapshot_procs(s, &m->who);
  const limits *l = &s->profile->limits;
  m->stop_bytes = l->disk_bytes * STOP_FACTOR;
  m->stop_inodes = l->disk_inodes * STOP_FACTOR;
  const char *pace = getenv("SMOLWF_PROVIDER_DISK_PACE_MS");
  m->pace_ms = pace ? (unsigned)strtoul(pace, NULL, 10) : 0;
  return m;
}

static void measure_free(measure *m) {
  for (int i = 0; i < 2; i++) if (m->areas[i] >= 0) close(m->areas[i]);
  if (m->view_fd >= 0) close(m->view_fd);
  disk_procs_free(&m->who);
  free(m);
}

/* ===== the disk watch, on the loop ===== */

typedef struct waiting {
  request *r;
  cJSON *params;
  disk_method_fn fn;
  unsigned after;             /* runs again once measure number `after` has ended */
  struct waiting *next;
} waiting;

typedef struct disk_watch {
  uv_timer_t timer;           /* data: the watch; the pause before the next measure */
  session *s;                 /* NULL once closed: freed when the timer is closed and no measure runs */
  bool timer_open;
  job *measuring;             /* the one measure in flight, or NULL */
  unsigned started, ended;    /* measures started / ended so far (their numbers) */
  bool again;                 /* a measure was asked for while one ran */
  bool measured;              /* a figure exists */
  uint64_t bytes, inodes;     /* the last figure */
  uint64_t hidden;            /* processes that hid their open files from it: the session counts as over */
  uint64_t hidden_last;       /* what the measure before found hidden */
  bool partial;
  uint64_t grew, grew_inodes; /* what the last figure grew by since the one before */
  uint64_t began_ms, took_ms; /* when the measure in flight began (loop time); how long the last one took */
  uint64_t apart_ms;          /* between the beginnings of the last two measures */
  uint64_t pause_ms;          /* before the next measure while commands run (next_pause) */
  uint64_t wrote, made;       /* bytes and files the provider wrote since the last measure began */
  uint64_t wrote_at_start, made_at_start;
  bool over;                  /* over an allowance at the last measure: commands killed, new ones refused */
  bool rerunning;             /* a waiting request runs again: it gets its answer now */
  waiting *first, *last;
} disk_watch;

static void free_if_done(disk_watch *w) {
  if (!w->s && !w->timer_open && !w->measuring) free(w);
}

static void on_timer_closed(uv_handle_t *h) {
  disk_watch *w = h->data;
  w->timer_open = false;
  free_if_done(w);
}

static void measure_done(job *j);
static void on_timer(uv_timer_t *t);

static void start_measure(disk_watch *w) {
  if (w->measuring) { w->again = true; return; }
  measure *m = measure_new(w->s);
  m->watch = w;
  w->wrote_at_start = w->wrote;
  w->made_at_start = w->made;
  w->measuring = job_start(provider_ctx()->loop, measure_work, measure_done, m);
  if (!w->measuring) {   /* no thread now: try again after the usual pause */
    measure_free(m);
    uv_timer_start(&w->timer, on_timer, DISK_CHECK_MS, 0);
    return;
  }
  w->started++;
  w->again = false;
  uint64_t now = uv_now(provider_ctx()->loop);
  w->apart_ms = now - w->began_ms;
  w->began_ms = now;
}

static void on_timer(uv_timer_t *t) {
  start_measure(t->data);
}

void disk_watch_open(session *s) {
  const limits *l = &s->profile->limits;
  if ((!l->disk_bytes && !l->disk_inodes) || s->disk) return;
  disk_watch *w = calloc(1, sizeof *w);
  if (!w) abort();
  w->s = s;
  uv_timer_init(provider_ctx()->loop, &w->timer);
  w->timer.data = w;
  w->timer_open = true;
  s->disk = w;
}

static uint64_t used_bytes(const disk_watch *w) {
  return w->bytes + w->wrote;
}

static bool over_caps(const disk_watch *w) {
  const limits *l = &w->s->profile->limits;
  return w->hidden || (l->disk_bytes && used_bytes(w) > l->disk_bytes) ||
         (l->disk_inodes && w->inodes + w->made > l->disk_inodes);
}

/* Over an allowance: every running command of the session is killed. */
static void act(disk_watch *w) {
  bool was = w->over;
  w->over = over_caps(w);
  if (!w->over || !procs_running(w->s)) return;
  const limits *l = &w->s->profile->limits;
  if (!was && w->hidden)
    fprintf(stderr, "smolwf-provider: session %s has %llu processes whose open files the provider may not read "
            "(non-dumpable or setuid), so its disk use is unknown: killing its commands\n", w->s->id,
            (unsigned long long)w->hidden);
  else if (!was)
    fprintf(stderr, "smolwf-provider: session %s uses %llu bytes in %llu inodes, over its cap (%llu bytes, "
            "%llu inodes; 0: none): killing its commands\n", w->s->id, (unsigned long long)used_bytes(w),
            (unsigned long long)(w->inodes + w->made), (unsigned long long)l->disk_bytes,
            (unsigned long long)l->disk_inodes);
  procs_signal_running(w->s, SIGKILL);
}

/* Requests that waited for the measure just ended get their answer. */
static void rerun_waiting(disk_watch *w) {
  while (w->first && w->first->after <= w->ended && w->s) {
    waiting *q = w->first;
    w->first = q->next;
    if (!w->first) w->last = NULL;
    w->rerunning = true;
    q->fn(q->r, w->s, q->params);
    if (w->s) w->rerunning = false;
    cJSON_Delete(q->params);
    free(q);
  }
}

static uint64_t shortest(const disk_watch *w) {
  return w->took_ms > DISK_CHECK_FAST_MS ? w->took_ms : DISK_CHECK_FAST_MS;
}

/* How long, at the rate usage grew since the last measure, until half of what is left of a cap is used. */
static uint64_t half_left_ms(const disk_watch *w, uint64_t grew, uint64_t used, uint64_t cap) {
  if (!cap || !grew) return UINT64_MAX;
  uint64_t left = used < cap ? cap - used : 0;
  return (uint64_t)((double)left / 2 / (double)grew * (double)(w->apart_ms ? w->apart_ms : 1));
}

/*
** The pause doubles from DISK_CHECK_FAST_MS (where a command's start puts
** it) up to DISK_CHECK_MS while usage stays, so a command that writes at
** once is caught early. While usage grows, the next measure comes by the
** time half of what is left would be used at that rate. A big tree is
** measured at most half the time (no pause is shorter than the last
** measure took), so measures never take a whole CPU.
*/
static uint64_t next_pause(disk_watch *w) {
  const limits *l = &w->s->profile->limits;
  uint64_t most = w->took_ms > DISK_CHECK_MS ? w->took_ms : DISK_CHECK_MS;
  uint64_t pause = w->pause_ms < most ? w->pause_ms : most;
  uint64_t by_bytes = half_left_ms(w, w->grew, used_bytes(w), l->disk_bytes);
  uint64_t by_inodes = half_left_ms(w, w->grew_inodes, w->inodes + w->made, l->disk_inodes);
  if (by_bytes < pause) pause = by_bytes;
  if (by_inodes < pause) pause = by_inodes;
  if (pause < shortest(w)) pause = shortest(w);
  w->pause_ms = w->grew || w->grew_inodes ? pause : 2 * pause;   /* the one after, while usage stays: later */
  return pause;
}

/* What comes after a measure: another at once, one after a pause while commands run, or none. */
static void plan_next(disk_watch *w) {
  if (w->again || w->first) { start_measure(w); return; }
  if (!procs_running(w->s)) return;
  uv_timer_start(&w->timer, on_timer, next_pause(w), 0);
}

static void measure_done(job *j) {
  measure *m = j->data;
  disk_watch *w = m->watch;
  w->measuring = NULL;
  if (!w->s) { measure_free(m); free_if_done(w); return; }
  w->ended = w->started;
  w->grew = m->bytes > w->bytes ? m->bytes - w->bytes : 0;
  w->grew_inodes = m->inodes > w->inodes ? m->inodes - w->inodes : 0;
  w->took_ms = uv_now(provider_ctx()->loop) - w->began_ms;
  w->bytes = m->bytes;
  w->inodes = m->inodes;
  /*
  ** A process found hidden once may be a command between vfork and exec,
  ** sharing its non-dumpable parent's memory (the bubblewrap helper's):
  ** hidden counts from the second measure in a row that finds one. One
  ** that stays hidden is caught a measure later; one that shows its
  ** table again has what it holds counted then.
  */
  w->hidden = w->hidden_last && m->hidden ? m->hidden : 0;
  w->hidden_last = m->hidden;
  w->partial = m->partial;
  w->measured = true;
  /* What the provider wrote after the measure began may be missing from it: it still counts on top. */
  w->wrote -= w->wrote_at_start;
  w->made -= w->made_at_start;
  measure_free(m);
  act(w);
  rerun_waiting(w);
  if (w->s) plan_next(w);
}

void disk_watch_changed(session *s, bool exited) {
  disk_watch *w = s->disk;
  if (!w) return;
  if (exited) { uv_timer_stop(&w->timer); start_measure(w); return; }
  w->pause_ms = shortest(w);   /* a new command: measure soon, then less and less often */
  if (!w->measured) start_measure(w);   /* the first figure, for the next command's file-size limit */
  else if (!w->measuring && !uv_is_active((uv_handle_t *)&w->timer))
    uv_timer_start(&w->timer, on_timer, w->pause_ms, 0);
}

int disk_watch_allows_start(session *s) {
  return s->disk && s->disk->over ? -EDQUOT : 0;
}

void disk_watch_limits(const session *s, limits *l) {
  const disk_watch *w = s->disk;
  if (!w || !l->disk_bytes || !w->measured) return;
  uint64_t used = used_bytes(w), left = used < l->disk_bytes ? (l->disk_bytes - used) / BLOCK * BLOCK : 0;
  if (l->file_size == RLIM_INFINITY || l->file_size > left) l->file_size = (rlim_t)left;
}

bool disk_watch_allows_write(const session *s, const char *path, uint64_t adding, uint64_t replacing, bool creates,
                             failure *f) {
  const disk_watch *w = s->disk;
  if (!w) return true;
  const limits *l = &s->profile->limits;
  if (!w->measured) return fail(f, "limit_exceeded", "write_file `%s`: the session's files were not measured yet", path);
  if (w->partial)
    return fail(f, "limit_exceeded", "write_file `%s`: the session's files take more than twice its cap of %llu %s "
                "(profile `%s`); remove files first", path,
                (unsigned long long)(l->disk_bytes ? l->disk_bytes : l->disk_inodes),
                l->disk_bytes && w->bytes > l->disk_bytes ? "bytes" : "inodes", s->profile->name);
  uint64_t used = used_bytes(w), after = (used > replacing ? used - replacing : 0) + adding;
  if (l->disk_bytes && after > l->disk_bytes)
    return fail(f, "limit_exceeded", "write_file `%s`: writing %llu bytes would take the session past its disk cap "
                "of %llu bytes (its files took %llu at the last measure, with what the provider wrote since; "
                "profile `%s`); remove files first", path, (unsigned long long)adding,
                (unsigned long long)l->disk_bytes, (unsigned long long)used, s->profile->name);
  uint64_t inodes = w->inodes + w->made + (creates ? 1 : 0);
  if (l->disk_inodes && inodes > l->disk_inodes)
    return fail(f, "limit_exceeded", "write_file `%s`: a new file would take the session past its inode cap of "
                "%llu (it had %llu at the last measure, with what the provider wrote since; profile `%s`); "
                "remove files first", path, (unsigned long long)l->disk_inodes, (unsigned long long)(inodes - 1),
                s->profile->name);
  return true;
}

void disk_watch_wrote(session *s, uint64_t bytes, bool creates) {
  if (!s->disk) return;
  s->disk->wrote += (bytes + BLOCK - 1) / BLOCK * BLOCK;
  s->disk->made += creates ? 1 : 0;
}

bool disk_watch_recheck(session *s, request *r, const cJSON *params, disk_method_fn fn) {
  disk_watch *w = s->disk;
  if (!w || w->rerunning) return false;
  waiting *q = calloc(1, sizeof *q);
  if (!q) abort();
  *q = (waiting){r, params ? cJSON_Duplicate(params, true) : NULL, fn, 0, NULL};
  start_measure(w);
  /* A measure in flight began before r came: r waits for the one after it. */
  q->after = w->started + (w->again ? 1 : 0);
  if (w->last) w->last->next = q;
  else w->first = q;
  w->last = q;
  return true;
}

void disk_watch_close(session *s) {
  disk_watch *w = s->disk;
  if (!w) return;
  s->disk = NULL;
  for (waiting *q = w->first, *next; q; q = next) {
    next = q->next;
    reply_error(q->r, "unknown_session", "%s: session `%s` was closed while the request waited for a disk measure",
                q->r->method, s->id);
    cJSON_Delete(q->params);
    free(q);
  }
  w->first = w->last = NULL;
  w->s = NULL;
  if (w->measuring) job_cancel(w->measuring);   /* its end frees w */
  uv_close((uv_handle_t *)&w->timer, on_timer_closed);
}
