/*
** The provider's side of the exec comparison: a minimal C client of a
** provider, so that exec through the provider and the plain posix_spawn
** loop (spawn_loop.c) differ by the provider alone, not by the client's
** language.
**
**   smolwf-bench-exec-client PROVIDER PROFILE PROGRAM [ARGS...]
**
** Starts `PROVIDER serve`, opens a session with PROFILE ("local/default"),
** then serves batches (batches.h): each start is one exec request of
** PROGRAM ARGS, timed from writing the request to reading its result,
** every reply line in between parsed with cJSON as a real client must.
** Requests name the session as smolwf does (session_ref below).
** A failed exec (an error reply or a non-zero exit) ends it with status 1.
** At the end of its input it closes the session and the provider's stdin.
** smolwf's own client (sb:exec, Lua) is timed by provider_bench.lua itself.
*/
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <spawn.h>
#include <stdbool.h>
#include <sys/wait.h>

#include "batches.h"
#include "bench_io.h"
#include "clock.h"

extern char **environ;

typedef struct client {
  outbuf out;          /* to the provider's stdin */
  int from;            /* the provider's stdout */
  linebuf lines;
  long next_id;
  long want_id;        /* the request being waited for */
  cJSON *result;       /* its result once it came */
  char *exec_head;     /* `,"method":"exec","params":{...}}` after the id */
} client;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "exec_client: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

/* Every reply line: events are parsed and dropped; the awaited result is kept. */
static int on_line(void *ctx, char *line, size_t len) {
  client *c = ctx;
  cJSON *msg = cJSON_ParseWithLength(line, len);
  if (msg == NULL) die("not JSON from the provider", line);
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  if (cJSON_IsNumber(id) && (long)id->valuedouble == c->want_id) {
    if (cJSON_GetObjectItemCaseSensitive(msg, "error")) die("the provider answered an error", line);
    cJSON *result = cJSON_DetachItemFromObjectCaseSensitive(msg, "result");
    if (result) c->result = result;
  }
  cJSON_Delete(msg);
  return 0;
}

/* Sends a request whose text after the id is `rest`; returns its result (the caller frees it). */
static cJSON *call(client *c, const char *rest) {
  char head[32];
  c->want_id = c->next_id++;
  out_put(&c->out, head, (size_t)snprintf(head, sizeof head, "{\"id\":%ld", c->want_id));
  out_str(&c->out, rest);
  out_flush(&c->out);
  c->result = NULL;
  while (c->result == NULL)
    if (!read_lines(c->from, &c->lines, on_line, c)) die("the provider closed its stdout", NULL);
  return c->result;
}

static double one_exec(void *ctx) {
  client *c = ctx;
  double t0 = now_us();
  cJSON *result = call(c, c->exec_head);
  double us = now_us() - t0;
  double code = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(result, "exit_code"));
  cJSON_Delete(result);
  if (code != 0) die("the command did not exit 0", NULL);
  return us;
}

static pid_t start_provider(const char *program, client *c) {
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) die("pipe", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from[1], 1);
  posix_spawn_file_actions_addclose(&fa, to[1]);
  posix_spawn_file_actions_addclose(&fa, from[0]);
  char *argv[] = {(char *)program, "serve", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, program, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) die(program, strerror(rc));
  close(to[0]);
  close(from[1]);
  c->out.fd = to[1];
  c->from = from[0];
  return pid;
}

/* `,"method":"open","params":{...}}\n` for PROFILE ("provider/name"). */
static char *open_request(const char *profile) {
  const char *slash = strchr(profile, '/');
  if (slash == NULL) die("a profile is PROVIDER/NAME, not", profile);
  cJSON *params = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(params, "metadata");
  cJSON_AddStringToObject(meta, "request_id", "bench");
  cJSON_AddStringToObject(meta, "sandbox_group_id", "bench");
  cJSON *prof = cJSON_AddObjectToObject(params, "profile");
  char *provider = strndup(profile, (size_t)(slash - profile));
  cJSON_AddStringToObject(prof, "provider", provider);
  cJSON_AddStringToObject(prof, "name", slash + 1);
  cJSON_AddNullToObject(cJSON_AddObjectToObject(params, "workspace_sync"), "host_path");
  cJSON_AddNullToObject(params, "cwd");
  char *text = cJSON_PrintUnformatted(params), *line = NULL;
  if (asprintf(&line, ",\"method\":\"open\",\"params\":%s}\n", text) < 0) die("out of memory", NULL);
  free(provider);
  free(text);
  cJSON_Delete(params);
  return line;
}

/*
** What a request names its session by, as smolwf's client does: the id
** alone where the session announces session_by_id, else the whole object.
*/
static cJSON *session_ref(const cJSON *session) {
  const cJSON *caps = cJSON_GetObjectItemCaseSensitive(session, "capabilities");
  if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(caps, "session_by_id"))) return cJSON_Duplicate(session, true);
  cJSON *ref = cJSON_CreateObject();
  cJSON_AddStringToObject(ref, "id", cJSON_GetObjectItemCaseSensitive(session, "id")->valuestring);
  return ref;
}

/* The exec request's text after its id, for session and argv (built once). */
static char *exec_request(const cJSON *session, char **argv) {
  cJSON *params = cJSON_CreateObject();
  cJSON_AddItemToObject(params, "session", session_ref(session));
  cJSON *args = cJSON_AddArrayToObject(params, "argv");
  for (char **a = argv; *a; a++) cJSON_AddItemToArray(args, cJSON_CreateString(*a));
  cJSON_AddNullToObject(params, "cwd");
  cJSON_AddNullToObject(params, "env");
  cJSON_AddNullToObject(params, "stdin_base64");
  char *text = cJSON_PrintUnformatted(params), *line = NULL;
  if (asprintf(&line, ",\"method\":\"exec\",\"params\":%s}\n", text) < 0) die("out of memory", NULL);
  free(text);
  cJSON_Delete(params);
  return line;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s PROVIDER PROFILE PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  client c = {.out = {-1, malloc(65536), 0, 65536}, .next_id = 1};
  linebuf_init(&c.lines, 64 << 20);
  pid_t pid = start_provider(argv[1], &c);
  char *open = open_request(argv[2]);
  cJSON *session = call(&c, open);
  if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(session, "id"))) die("open gave no session id", NULL);
  c.exec_head = exec_request(session, argv + 3);
  int status = serve_batches("exec_client", one_exec, &c);
  cJSON *ref = session_ref(session);
  char *session_text = cJSON_PrintUnformatted(ref), *close_req = NULL;
  cJSON_Delete(ref);
  if (asprintf(&close_req, ",\"method\":\"close\",\"params\":{\"session\":%s}}\n", session_text) < 0)
    die("out of memory", NULL);
  cJSON_Delete(call(&c, close_req));
  close(c.out.fd);
  waitpid(pid, NULL, 0);
  free(close_req);
  free(session_text);
  free(open);
  free(c.exec_head);
  free(c.out.buf);
  cJSON_Delete(session);
  linebuf_free(&c.lines);
  return status;
}
