/*
** Workspaces: what a session's workspace costs, side by side in one run.
**
**   smolwf-bench-workspace PROVIDER [ROUNDS] [SCALE]
**
** Generates host trees (empty, 1 MB, 100 MB / 10k files, 1 GB / 100k
** files; SCALE divides the two big ones, for a quick run) under $TMPDIR,
** then prints medians of ROUNDS (default 10):
**   - open + close against the tree's size: bwrap with an overlay, bwrap
**     with the copy (the kernel's overlay refused), local (a copy);
**   - fork + close of a bwrap session whose workspace holds the 1 GB tree;
**   - another session's exec{"true"} while a 1 GB copy opens, against idle;
**   - 100 fresh tests on the 100 MB tree after one setup step: a fork per
**     test against a fresh open (copy) per test;
**   - exec and file operations in an overlay workspace against a plain one
**     (what an overlay lookup costs).
** Every figure is printed; nothing passes or fails. Each provider is
** driven by a minimal C client (cJSON), so the figures are the provider's.
*/
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_io.h"
#include "clock.h"
#include "median.h"

extern char **environ;

/* ====================================================== the client */

#define MAX_KEPT 64

typedef struct client {
  pid_t pid;
  outbuf out;
  int from;
  linebuf lines;
  long next_id;
  long ids[MAX_KEPT];      /* terminal replies that came while another was awaited */
  cJSON *kept[MAX_KEPT];
  int nkept;
} client;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "workspace_bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static int on_line(void *ctx, char *line, size_t len) {
  client *c = ctx;
  cJSON *msg = cJSON_ParseWithLength(line, len);
  if (!msg) die("not JSON from the provider", line);
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  if (cJSON_GetObjectItemCaseSensitive(msg, "event") || !cJSON_IsNumber(id) || c->nkept == MAX_KEPT) {
    cJSON_Delete(msg);
    return 0;
  }
  c->ids[c->nkept] = (long)id->valuedouble;
  c->kept[c->nkept++] = msg;
  return 0;
}

static long send_req(client *c, const char *method, cJSON *params) {
  long id = ++c->next_id;
  cJSON *req = cJSON_CreateObject();
  cJSON_AddNumberToObject(req, "id", (double)id);
  cJSON_AddStringToObject(req, "method", method);
  cJSON_AddItemToObject(req, "params", params ? params : cJSON_CreateObject());
  char *text = cJSON_PrintUnformatted(req);
  out_str(&c->out, text);
  out_str(&c->out, "\n");
  out_flush(&c->out);
  free(text);
  cJSON_Delete(req);
  return id;
}

/* Waits for id's terminal reply; returns its result (the caller frees it), dies on an error. */
static cJSON *await(client *c, long id) {
  for (;;) {
    for (int i = 0; i < c->nkept; i++) {
      if (c->ids[i] != id) continue;
      cJSON *msg = c->kept[i];
      c->ids[i] = c->ids[--c->nkept];
      c->kept[i] = c->kept[c->nkept];
      cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
      if (err) { char *t = cJSON_PrintUnformatted(err); die("the provider answered an error", t); }
      cJSON *result = cJSON_DetachItemFromObjectCaseSensitive(msg, "result");
      cJSON_Delete(msg);
      return result;
    }
    if (!read_lines(c->from, &c->lines, on_line, c)) die("the provider closed its output", NULL);
  }
}

static cJSON *call(client *c, const char *method, cJSON *params) {
  return await(c, send_req(c, method, params));
}

static void start(client *c, const char *provider, const char *env_extra) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) die("pipe", NULL);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  char *argv[] = {(char *)provider, "serve", NULL};
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof *env);
  memcpy(env, environ, n * sizeof *env);
  if (env_extra) env[n++] = (char *)env_extra;
  if (posix_spawn(&c->pid, provider, &fa, NULL, argv, env) != 0) die("cannot start", provider);
  free(env);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  memset(&c->out, 0, sizeof c->out);
  c->out.fd = in[1];
  c->from = out[0];
  linebuf_init(&c->lines, 512u << 20);
  c->next_id = 0;
  c->nkept = 0;
}

static void stop(client *c) {
  cJSON_Delete(call(c, "shutdown", NULL));
  close(c->out.fd);
  free(c->out.buf);
  int status;
  waitpid(c->pid, &status, 0);
  close(c->from);
  linebuf_free(&c->lines);
}

/* ====================================================== sessions */

static cJSON *open_params(const char *profile, const char *host_path) {
  cJSON *p = cJSON_CreateObject(), *prof = cJSON_AddObjectToObject(p, "profile");
  char provider[64];
  snprintf(provider, sizeof provider, "%.*s", (int)strcspn(profile, "/"), profile);
  cJSON_AddStringToObject(prof, "provider", provider);
  cJSON_AddStringToObject(prof, "name", strchr(profile, '/') + 1);
  cJSON *sync = cJSON_AddObjectToObject(p, "workspace_sync");
  if (host_path) cJSON_AddStringToObject(sync, "host_path", host_path);
  return p;
}

/* The session object from an open or fork result; the caller frees it. */
static cJSON *open_session(client *c, const char *profile, const char *host_path) {
  return call(c, "open", open_params(profile, host_path));
}

static cJSON *with_session(const cJSON *s) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddItemToObject(p, "session", cJSON_Duplicate(s, true));
  return p;
}

static void close_session(client *c, cJSON *s) {
  cJSON_Delete(call(c, "close", cJSON_Duplicate(s, true)));
  cJSON_Delete(s);
}

static void exec_true(client *c, const cJSON *s) {
  cJSON *p = with_session(s), *argv = cJSON_AddArrayToObject(p, "argv");
  cJSON_AddItemToArray(argv, cJSON_CreateString("true"));
  cJSON_Delete(call(c, "exec", p));
}

static void exec_sh(client *c, const cJSON *s, const char *script) {
  cJSON *p = with_session(s), *argv = cJSON_AddArrayToObject(p, "argv");
  cJSON_AddItemToArray(argv, cJSON_CreateString("sh"));
  cJSON_AddItemToArray(argv, cJSON_CreateString("-c"));
  cJSON_AddItemToArray(argv, cJSON_CreateString(script));
  cJSON_Delete(call(c, "exec", p));
}

static void file_op(client *c, const cJSON *s, const char *method, const char *path) {
  cJSON *p = with_session(s);
  cJSON_AddStringToObject(p, "path", path);
  cJSON_Delete(call(c, method, p));
}

static const char *mechanism(const cJSON *s) {
  const cJSON *caps = cJSON_GetObjectItemCaseSensitive(s, "capabilities");
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(caps, "workspace");
  return cJSON_IsString(ws) ? ws->valuestring : "?";
}

/* ====================================================== trees and figures */

/* files files of `size` bytes, 100 to a directory, under dir. */
static void make_tree(const char *dir, long files, long size) {
  char path[4096];
  char *data = malloc((size_t)size + 1);
  memset(data, 'x', (size_t)size);
  if (mkdir(dir, 0755) < 0) die("mkdir", dir);
  for (long i = 0; i < files; i++) {
    if (i % 100 == 0) {
      snprintf(path, sizeof path, "%s/d%ld", dir, i / 100);
      mkdir(path, 0755);
    }
    snprintf(path, sizeof path, "%s/d%ld/f%ld", dir, i / 100, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, data, (size_t)size) != size) die("writing", path);
    close(fd);
  }
  free(data);
}

static double median(double *v, int n) {
  return bench_median(v, (size_t)n);
}

typedef struct tree {
  const char *label;
  char path[4096];
  long files, size;
} tree;

/* The median ms of open + close of t under profile (on client c). */
static double open_close_ms(client *c, const char *profile, const tree *t, int rounds, char *mech, size_t mlen) {
  double *v = calloc((size_t)rounds, sizeof *v);
  for (int i = 0; i < rounds; i++) {
    double t0 = now_us();
    cJSON *s = open_session(c, profile, t->files ? t->path : NULL);
    if (i == 0) snprintf(mech, mlen, "%s", mechanism(s));
    close_session(c, s);
    v[i] = (now_us() - t0) / 1e3;
  }
  double m = median(v, rounds);
  free(v);
  return m;
}

static void bench_open_close(const char *provider, tree *trees, int ntrees, int rounds) {
  client overlay, copy, local;
  start(&overlay, provider, NULL);
  start(&copy, provider, "SMOLWF_PROVIDER_NO_OVERLAY=1");
  start(&local, provider, NULL);
  printf("== open + close against the workspace's size (median of %d; copies: median of %d)\n", rounds, rounds < 3 ? rounds : 3);
  printf("%-24s %22s %22s %22s\n", "workspace", "bwrap overlay", "bwrap copy", "local copy");
  double empty = 0;
  for (int i = 0; i < ntrees; i++) {
    char m1[32], m2[32], m3[32];
    int copy_rounds = rounds < 3 ? rounds : 3;   /* a 1 GB copy takes seconds */
    double o = open_close_ms(&overlay, "bwrap/default", &trees[i], rounds, m1, sizeof m1);
    double cp = open_close_ms(&copy, "bwrap/default", &trees[i], copy_rounds, m2, sizeof m2);
    double l = open_close_ms(&local, "local/default", &trees[i], copy_rounds, m3, sizeof m3);
    if (i == 0) empty = o;
    printf("%-24s %9.2f ms %-10s %9.2f ms %-10s %9.2f ms %-10s", trees[i].label, o, m1, cp, m2, l, m3);
    if (i > 0) printf("  overlay %.2fx empty", o / empty);
    printf("\n");
  }
  stop(&overlay);
  stop(&copy);
  stop(&local);
}

static void bench_fork(const char *provider, const tree *big, int rounds) {
  client c;
  start(&c, provider, NULL);
  cJSON *parent = open_session(&c, "bwrap/default", big->path);
  exec_sh(&c, parent, "echo built > out; mkdir -p gen && head -c 1048576 /dev/zero > gen/blob");
  double *v = calloc((size_t)rounds, sizeof *v);
  for (int i = 0; i < rounds; i++) {
    double t0 = now_us();
    cJSON *child = call(&c, "fork", with_session(parent));
    double t1 = now_us();
    close_session(&c, child);
    v[i] = (t1 - t0) / 1e3;
  }
  printf("== fork of a bwrap session whose workspace holds %s (median of %d)\n", big->label, rounds);
  printf("%-48s %9.2f ms   (target < 50 ms)\n", "fork (the new session ready)", median(v, rounds));
  free(v);
  close_session(&c, parent);
  stop(&c);
}

/* Another session's exec{"true"} latency, idle and while a big copy opens. */
static void bench_latency(const char *provider, const tree *big, int rounds) {
  client c;
  start(&c, provider, NULL);
  cJSON *s = open_session(&c, "local/default", NULL);
  int n = rounds * 20;
  double *idle = calloc((size_t)n, sizeof *idle), *busy = calloc((size_t)n, sizeof *busy);
  for (int i = 0; i < n; i++) { double t0 = now_us(); exec_true(&c, s); idle[i] = (now_us() - t0) / 1e3; }
  long opening = send_req(&c, "open", open_params("local/default", big->path));
  double t_open = now_us();
  int m = 0;
  for (; m < n; m++) {
    double t0 = now_us();
    exec_true(&c, s);
    busy[m] = (now_us() - t0) / 1e3;
  }
  cJSON *big_session = await(&c, opening);
  double open_ms = (now_us() - t_open) / 1e3;
  double mi = median(idle, n), mb = median(busy, m);
  printf("== exec{\"true\"} in another session while a %s copy opens (median of %d)\n", big->label, n);
  printf("%-48s %9.3f ms\n", "idle", mi);
  printf("%-48s %9.3f ms   (%.2fx idle; target <= 2x; the open took %.0f ms)\n", "during the open", mb, mb / mi, open_ms);
  close_session(&c, big_session);
  close_session(&c, s);
  free(idle);
  free(busy);
  stop(&c);
}

/* Total ms of `tests` fresh sessions, each an open of t under profile, the setup step and a test. */
static double fresh_opens(client *c, const char *profile, const tree *t, int tests) {
  double t0 = now_us();
  for (int i = 0; i < tests; i++) {
    cJSON *s = open_session(c, profile, t->path);
    exec_sh(c, s, "echo built > setup.out");
    exec_true(c, s);
    close_session(c, s);
  }
  return (now_us() - t0) / 1e3;
}

/* Total ms of one setup then `tests` forks of its session, each running a test. */
static double forked(client *c, const char *profile, const tree *t, int tests) {
  double t0 = now_us();
  cJSON *base = open_session(c, profile, t->path);
  exec_sh(c, base, "echo built > setup.out");
  for (int i = 0; i < tests; i++) {
    cJSON *child = call(c, "fork", with_session(base));
    exec_true(c, child);
    close_session(c, child);
  }
  close_session(c, base);
  return (now_us() - t0) / 1e3;
}

/*
** Fresh tests after one setup: a fork each, against a fresh open each (an
** overlay, and the copy). A fresh copy costs seconds, so `sample` of them
** are timed and the total is that times tests / sample (said so).
*/
static void bench_fresh_tests(const char *provider, const tree *mid, int tests, int sample) {
  client c, copy;
  start(&c, provider, NULL);
  start(&copy, provider, "SMOLWF_PROVIDER_NO_OVERLAY=1");
  double scale = (double)tests / sample;
  printf("== %d fresh tests on %s, one setup step each way (total; fresh copies: %d timed, x%.0f)\n",
         tests, mid->label, sample, scale);
  double f = forked(&c, "bwrap/default", mid, tests), o = fresh_opens(&c, "bwrap/default", mid, tests);
  double cp = fresh_opens(&copy, "bwrap/default", mid, sample) * scale;
  printf("%-14s forks %7.0f ms   fresh overlays %7.0f ms   fresh copies %7.0f ms (%.1fx the forks)\n",
         "bwrap/default", f, o, cp, cp / f);
  double lf = forked(&c, "local/default", mid, tests), lc = fresh_opens(&c, "local/default", mid, sample) * scale;
  printf("%-14s forks %7.0f ms   fresh copies %7.0f ms (%.1fx the forks)\n", "local/default", lf, lc, lc / lf);
  stop(&c);
  stop(&copy);
}

/* One timed operation f (0: exec, else a file operation) on session s. */
static double timed_op(client *c, const cJSON *s, int f) {
  static const char *const what[4] = {"exec", "read_file", "stat", "read_file"};
  static const char *const path[4] = {NULL, "d0/f0", "d0/f1", "up.txt"};
  double t0 = now_us();
  if (f == 0) exec_true(c, s); else file_op(c, s, what[f], path[f]);
  return (now_us() - t0) / 1e3;
}

/*
** exec and file operations in an overlay workspace, against the same in a
** plain (copied) one, interleaved one by one so a busy machine slows both alike.
*/
static void bench_lookup(const char *provider, const tree *small, int rounds) {
  client overlay, copy;
  start(&overlay, provider, NULL);
  start(&copy, provider, "SMOLWF_PROVIDER_NO_OVERLAY=1");
  client *cs[2] = {&overlay, &copy};
  cJSON *ss[2];
  for (int k = 0; k < 2; k++) {
    ss[k] = open_session(cs[k], "bwrap/default", small->path);
    exec_sh(cs[k], ss[k], "echo upper > up.txt");
  }
  int n = rounds * 50;
  double *v[2] = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double))};
  printf("== exec and file operations: overlay workspace against a copied one (median of %d, interleaved)\n", n);
  static const char *const names[4] = {"exec{\"true\"}", "read_file (lower layer)", "stat (lower layer)", "read_file (upper layer)"};
  for (int f = 0; f < 4; f++) {
    for (int i = 0; i < n; i++)
      for (int k = 0; k < 2; k++) v[k][i] = timed_op(cs[k], ss[k], f);
    double o = median(v[0], n), cp = median(v[1], n);
    printf("%-30s overlay %8.3f ms   copy %8.3f ms   (%.2fx)\n", names[f], o, cp, o / cp);
  }
  for (int k = 0; k < 2; k++) { free(v[k]); close_session(cs[k], ss[k]); }
  stop(&overlay);
  stop(&copy);
}

int main(int argc, char **argv) {
  if (argc < 2) die("usage: smolwf-bench-workspace PROVIDER [ROUNDS] [SCALE]", NULL);
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);   /* each figure as soon as it is measured */
  int rounds = argc > 2 ? atoi(argv[2]) : 10;
  long scale = argc > 3 ? atol(argv[3]) : 1;
  if (rounds < 1 || scale < 1) die("ROUNDS and SCALE must be positive", NULL);
  const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char base[2048];
  snprintf(base, sizeof base, "%.1900s/smolwf-bench-workspace.XXXXXX", tmp);
  if (!mkdtemp(base)) die("mkdtemp", base);
  tree trees[] = {
    {"empty", "", 0, 0},
    {"1 MB / 100 files", "", 100, 10240},
    {"100 MB / 10k files", "", 10000 / scale, 10240},
    {"1 GB / 100k files", "", 100000 / scale, 10240},
  };
  for (int i = 1; i < 4; i++) {
    snprintf(trees[i].path, sizeof trees[i].path, "%s/t%d", base, i);
    double t0 = now_us();
    make_tree(trees[i].path, trees[i].files, trees[i].size);
    fprintf(stderr, "workspace_bench: generated %s in %.1f s\n", trees[i].label, (now_us() - t0) / 1e6);
  }
  if (scale > 1) printf("(SCALE %ld: the two big trees hold 1/%ld of their files)\n", scale, scale);
  bench_open_close(argv[1], trees, 4, rounds);
  bench_fork(argv[1], &trees[3], rounds);
  bench_latency(argv[1], &trees[3], rounds);
  int tests = 100 / (int)(scale > 10 ? 10 : scale);
  bench_fresh_tests(argv[1], &trees[2], tests, tests < 10 ? tests : 10);
  bench_lookup(argv[1], &trees[1], rounds);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  return system(cmd) == 0 ? 0 : 1;
}
