/*
** The process methods (see process_methods.h).
*/
#define _GNU_SOURCE
#include "process_methods.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk_cap.h"
#include "errcodes.h"
#include "params.h"
#include "paths.h"
#include "process.h"
#include "signames.h"

#define DEFAULT_GRACE_MS 2000
#define BASE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* ===== environment ===== */

/* Sets KEY=VALUE in env (n entries, room for one more), replacing an entry with the same key. */
static void env_set(char **env, size_t *n, const char *key, size_t keylen, const char *value) {
  size_t vlen = strlen(value);
  char *entry = malloc(keylen + vlen + 2);
  if (!entry) abort();
  memcpy(entry, key, keylen);
  entry[keylen] = '=';
  memcpy(entry + keylen + 1, value, vlen + 1);
  for (size_t i = 0; i < *n; i++)
    if (strncmp(env[i], key, keylen) == 0 && env[i][keylen] == '=') { free(env[i]); env[i] = entry; return; }
  env[(*n)++] = entry;
}

/* Base (PATH, HOME, LANG, TMPDIR) + the profile's + the request's: nothing of the provider's own. */
static bool build_env(const session *s, const cJSON *params, char ***out, failure *f) {
  const cJSON *req = NULL;
  if (!param_object(params, "env", &req, f)) return false;
  size_t cap = 5 + (size_t)cJSON_GetArraySize(req), n = 0;
  for (char **e = s->profile->env; e && *e; e++) cap++;
  char **env = calloc(cap, sizeof *env);
  if (!env) abort();
  env_set(env, &n, "PATH", 4, BASE_PATH);
  env_set(env, &n, "HOME", 4, s->workspace_view);
  env_set(env, &n, "LANG", 4, "C.UTF-8");
  env_set(env, &n, "TMPDIR", 6, s->tmp_view);
  for (char **e = s->profile->env; e && *e; e++) env_set(env, &n, *e, strcspn(*e, "="), strchr(*e, '=') + 1);
  const cJSON *item;
  cJSON_ArrayForEach(item, req) {
    if (!cJSON_IsString(item) || !*item->string || strchr(item->string, '=')) {
      strv_free(env);
      return fail(f, "invalid_request", "field `env`: entry `%s` must be a string under a name without `=`", item->string);
    }
    env_set(env, &n, item->string, strlen(item->string), item->valuestring);
  }
  *out = env;
  return true;
}

/* ===== options ===== */

static void opts_free(proc_options *o) {
  strv_free(o->argv);
  strv_free(o->envp);
  free(o->stdin_data);
}

static bool parse_cwd(const session *s, const cJSON *params, proc_options *o, failure *f) {
  const char *cwd = NULL;
  if (!param_string(params, "cwd", true, &cwd, f)) return false;
  if (!cwd) { snprintf(o->cwd, sizeof o->cwd, "%s", s->cwd_view); return true; }
  resolved p;
  if (!path_resolve(s, "cwd", cwd, &p, f)) return false;
  int fd = path_open(&p, O_PATH | O_DIRECTORY, 0);
  if (fd < 0) return fail_errno(f, -fd, "cwd", cwd);
  close(fd);
  snprintf(o->cwd, sizeof o->cwd, "%s", p.view);
  return true;
}

static bool parse_opts(const session *s, const cJSON *params, proc_options *o, failure *f) {
  memset(o, 0, sizeof *o);
  o->grace_ms = DEFAULT_GRACE_MS;
  o->max_output = PROC_MAX_OUTPUT;
  const cJSON *stdin_field = cJSON_GetObjectItemCaseSensitive(params, "stdin_base64");
  o->has_stdin = stdin_field && !cJSON_IsNull(stdin_field);
  return param_strv(params, "argv", &o->argv, f) && parse_cwd(s, params, o, f) &&
         build_env(s, params, &o->envp, f) &&
         param_base64(params, "stdin_base64", &o->stdin_data, &o->stdin_len, f) &&
         param_uint(params, "timeout_ms", &o->timeout_ms, f) &&
         param_uint(params, "idle_timeout_ms", &o->idle_timeout_ms, f) &&
         param_uint(params, "kill_grace_ms", &o->grace_ms, f) &&
         param_uint(params, "max_output_bytes", &o->max_output, f) &&
         param_bool(params, "raw_output", &o->raw_output, f) &&
         (o->max_output <= PROC_MAX_OUTPUT ||
          fail(f, "invalid_request", "field `max_output_bytes`: at most %llu (the result must fit in one line)",
               PROC_MAX_OUTPUT));
}

/* The part exec and spawn share: parse and start. Returns the running proc, or NULL after answering r. */
static proc *start(request *r, session *s, const cJSON *params, bool is_exec) {
  /* Refused over the disk cap only once a measure newer than r agrees (files may have been removed since). */
  if (disk_watch_allows_start(s) < 0 && disk_watch_recheck(s, r, params, is_exec ? method_exec : method_spawn))
    return NULL;
  proc_options o;
  failure f;
  if (!parse_opts(s, params, &o, &f)) { opts_free(&o); reply_failure(r, &f); return NULL; }
  int err = 0;
  proc *p = proc_start(s, is_exec, &o, &err);
  /* EAGAIN from fork: the user's process limit (RLIMIT_NPROC) */
  const char *code = err == -EAGAIN ? "limit_exceeded" : errno_code(-err);
  if (!p) reply_error(r, code, "%s: cannot start `%s`: %s", r->method, o.argv[0], strerror(-err));
  opts_free(&o);
  return p;
}

void method_exec(request *r, session *s, const cJSON *params) {
  proc *p = start(r, s, params, true);
  if (p) proc_exec(p, r);
}

void method_spawn(request *r, session *s, const cJSON *params) {
  proc *p = start(r, s, params, false);
  if (p) proc_spawned(p, r);
}

/* ===== wait, kill, write_stdin ===== */

/* The session's process named by params.process_id, or NULL after answering r. */
static proc *find_proc(request *r, session *s, const cJSON *params) {
  const char *id = NULL;
  failure f;
  if (!param_string(params, "process_id", false, &id, &f)) { reply_failure(r, &f); return NULL; }
  proc *p = procs_find(s, id);
  if (!p) reply_error(r, "unknown_process", "%s: no process `%s` in session %s", r->method, id, s->id);
  return p;
}

void method_wait(request *r, session *s, const cJSON *params) {
  uint64_t timeout_ms = UINT64_MAX;
  failure f;
  if (!param_uint(params, "timeout_ms", &timeout_ms, &f)) { reply_failure(r, &f); return; }
  proc *p = find_proc(r, s, params);
  if (!p) return;
  if (p->is_exec) { reply_error(r, "invalid_request", "wait: `%s` is an exec; its result answers the exec", p->id); return; }
  if (p->req) { reply_error(r, "invalid_request", "wait: process `%s` is already being waited for", p->id); return; }
  proc_wait(p, r, timeout_ms);
}

void method_kill(request *r, session *s, const cJSON *params) {
  const char *name = "TERM";
  failure f;
  if (!param_string(params, "signal", true, &name, &f)) { reply_failure(r, &f); return; }
  int signo = signal_from_name(name);
  if (!signo) { reply_error(r, "invalid_request", "kill: unknown signal `%s`", name); return; }
  proc *p = find_proc(r, s, params);
  if (!p) return;
  int rc = proc_signal(p, signo);
  if (rc < 0) reply_error(r, errno_code(-rc), "kill: process `%s`: %s", p->id, strerror(-rc));
  else reply_result(r, cJSON_CreateObject());
}

void method_write_stdin(request *r, session *s, const cJSON *params) {
  char *data = NULL;
  size_t len = 0;
  bool eof = false;
  failure f;
  if (!param_bool(params, "eof", &eof, &f) || !param_base64(params, "data_base64", &data, &len, &f)) {
    reply_failure(r, &f);
    return;
  }
  proc *p = find_proc(r, s, params);
  if (p && !proc_stdin_open(p)) {
    reply_error(r, "invalid_request", "write_stdin: the stdin of process `%s` is closed", p->id);
    p = NULL;
  }
  if (!p) { free(data); return; }
  proc_write_stdin(p, data, len, eof, r);
}
