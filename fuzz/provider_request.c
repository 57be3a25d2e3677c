/*
** Fuzzing the provider's request path: each input is request lines (split
** at '\n'), decoded, checked and dispatched exactly as `serve` does
** (envelope.c, methods.c), against a real local session ("s1") with its
** files in a temp directory. The fuzz build runs /bin/echo for every
** command (process.c); opens are kept to local/default, and a
** workspace_sync.host_path to a directory of the harness.
**
** Asserts, besides no sanitizer report:
**   - every line written is UTF-8 JSON with an id and one of result,
**     error, event (check.h);
**   - every request gets exactly one terminal reply, by its id (null for
**     an id that is not sound), and no event after it; a line that is
**     not UTF-8 or holds NUL is refused (errors only);
**   - nothing beside the provider's root changed: a canary directory and
**     the listing of the directory around it.
**
** Between inputs the session stays when the input only read; otherwise
** every session is closed (in-flight requests answered) and s1 opened
** again, so inputs do not pile state up.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "context.h"
#include "envelope.h"
#include "fake_wire.h"
#include "keeper.h"
#include "lifecycle.h"
#include "methods.h"
#include "profile.h"
#include "session.h"
#include "strays.h"
#include "tree.h"
#include "tree_listing.h"

/* How long requests may take before every session is closed to end them, and then to end. */
#define SETTLE_MS 20
#define CLOSE_MS 5000
/* Ids counted per input; beyond, an input's ids go unchecked. */
#define MAX_IDS 256

static struct {
  char base[4096], run[4200], ws[4200], canary[4200];
  char *canary_before, *base_before;
} dirs;

/* What an input's requests were promised and got, per id. */
typedef struct tally {
  char *key;
  int expected, terminals;
  bool event_after_end;
} tally;

static tally tallies[MAX_IDS];
static size_t ntallies;
static bool ids_overflow;
static bool stopped;   /* a shutdown was served: no more lines, as serve */
static bool changed;   /* a request may have left a session or process behind: close every session after the input */
static bool wrote;     /* a request may have left files in s1: empty its workspace and tmp after the input */
static bool show_replies;   /* $FUZZ_SHOW set: every reply on stderr, for reading a finding */

static tally *tally_of(const char *key) {
  for (size_t i = 0; i < ntallies; i++)
    if (strcmp(tallies[i].key, key) == 0) return &tallies[i];
  if (ntallies == MAX_IDS) { ids_overflow = true; return NULL; }
  tallies[ntallies] = (tally){.key = strdup(key)};
  return &tallies[ntallies++];
}

static void clear_tallies(void) {
  for (size_t i = 0; i < ntallies; i++) free(tallies[i].key);
  ntallies = 0;
  ids_overflow = false;
}

static int outstanding(void) {
  int n = 0;
  for (size_t i = 0; i < ntallies; i++)
    if (tallies[i].terminals < tallies[i].expected) n += tallies[i].expected - tallies[i].terminals;
  return n;
}

/* ===== replies ===== */

/* Counts one reply line; on a refused line (refused_line) only checks that it is an error. */
static void count_reply(const char *line, size_t len, bool refused_line) {
  if (show_replies) fprintf(stderr, "< %.*s\n", (int)(len > 300 ? 300 : len), line);
  cJSON *msg = fuzz_check_reply(line, len);
  char *key = fuzz_id_key(cJSON_GetObjectItemCaseSensitive(msg, "id"));
  if (!key) fuzz_fail("a reply's id is not one a request could have: %.*s", (int)len, line);
  bool event = cJSON_GetObjectItemCaseSensitive(msg, "event") != NULL;
  if (refused_line) {
    if (!cJSON_GetObjectItemCaseSensitive(msg, "error")) fuzz_fail("a line that is not UTF-8 or holds NUL got: %.*s", (int)len, line);
  } else {
    tally *t = tally_of(key);
    if (t && event && t->expected == 1 && t->terminals == 1) t->event_after_end = true;
    if (t && !event) t->terminals++;
  }
  free(key);
  cJSON_Delete(msg);
}

/* Takes every line written since the last call. */
static void drain_replies(bool refused_line) {
  size_t len;
  const char *out = fake_wire_output(&len);
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(out + at, '\n', len - at);
    if (!nl) fuzz_fail("a reply line does not end with a newline");
    count_reply(out + at, (size_t)(nl - (out + at)), refused_line);
    at = (size_t)(nl - out) + 1;
  }
  fake_wire_clear();
}

/* ===== what each line is owed ===== */

/*
** Whether a string on the line holds the escape \u0000: a quote opens or
** closes a string, and inside one a backslash takes the next character
** with it (so "\\u0000" is a backslash and "u0000", no NUL).
*/
static bool escapes_nul(const char *line, size_t len) {
  bool quoted = false;
  for (size_t i = 0; i < len; i++) {
    if (line[i] == '"') {
      quoted = !quoted;
    } else if (quoted && line[i] == '\\') {
      if (len - i >= 6 && memcmp(line + i, "\\u0000", 6) == 0) return true;
      i++;
    }
  }
  return false;
}

/* Whether the envelope refuses the whole line: not UTF-8, or NUL raw or escaped. */
static bool refused_as_text(const char *line, size_t len) {
  return !fuzz_utf8_valid(line, len) || memchr(line, '\0', len) || escapes_nul(line, len);
}

static size_t skip_space(const char *line, size_t at, size_t len) {
  while (at < len && (line[at] == ' ' || line[at] == '\t' || line[at] == '\r')) at++;
  return at;
}

static size_t members_named(const cJSON *obj, const char *name) {
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) n += strcmp(c->string, name) == 0;
  return n;
}

static void expect_reply(const char *key) {
  tally *t = tally_of(key);
  if (t) t->expected++;
}

/*
** docs/protocol.md, "Envelope": every object on a line is answered once,
** by its id when that is sound, else with id null; a line that is no
** JSON, or a value that is no object, once with id null, and nothing
** after it is read.
*/
static void expect_line(const char *line, size_t len) {
  for (size_t at = skip_space(line, 0, len), count = 0; at < len; count++) {
    const char *end = NULL;
    cJSON *msg = cJSON_ParseWithLengthOpts(line + at, len - at, &end, 0);
    if (!cJSON_IsObject(msg)) {
      if (msg || count == 0) expect_reply("null");
      cJSON_Delete(msg);
      return;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    char *key = id && members_named(msg, "id") == 1 ? fuzz_id_key(id) : NULL;
    expect_reply(key && strcmp(key, "null") != 0 ? key : "null");
    free(key);
    cJSON_Delete(msg);
    at = skip_space(line, (size_t)(end - line), len);
  }
}

/* ===== serving ===== */

static void close_every_session(void) {
  sessions_close_every();
  changed = true;
}

/* An open's params as the harness allows them: local/default's isolation, the harness's workspace. */
static cJSON *tame_open(const cJSON *params) {
  cJSON *p = params ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
  cJSON *profile = cJSON_GetObjectItemCaseSensitive(p, "profile");
  if (!profile) {
    profile = cJSON_AddObjectToObject(p, "profile");
    cJSON_AddStringToObject(profile, "name", "default");
  }
  if (cJSON_IsObject(profile)) {
    cJSON_DeleteItemFromObjectCaseSensitive(profile, "provider");
    cJSON_AddStringToObject(profile, "provider", "local");
  }
  cJSON *ws = cJSON_GetObjectItemCaseSensitive(p, "workspace_sync");
  cJSON *host = cJSON_GetObjectItemCaseSensitive(ws, "host_path");
  if (cJSON_IsString(host) && host->valuestring[0]) cJSON_SetValuestring(host, dirs.ws);
  return p;
}

/*
** What a method may leave behind for later inputs: a session or a process
** not waited for (every session is closed after the input), or files in
** s1 (its workspace and tmp are emptied). An exec's process is forgotten
** once it is answered; wait, kill and remove only take away.
*/
static void note_changes(const char *method) {
  static const char *const sessions[] = {"open", "close", "fork", "spawn", NULL};
  static const char *const files[] = {"create_dir_all", "write_file", "create_temp_dir", "write_archive", NULL};
  for (int i = 0; sessions[i]; i++) changed |= strcmp(method, sessions[i]) == 0;
  for (int i = 0; files[i]; i++) wrote |= strcmp(method, files[i]) == 0;
}

/* server.c's serve_request, but for shutdown, which here closes the sessions and stops reading only. */
static void serve(request *r, const cJSON *params) {
  note_changes(r->method);
  if (strcmp(r->method, "shutdown") == 0) {
    stopped = true;
    close_every_session();
    reply_result(r, cJSON_CreateObject());
  } else if (strcmp(r->method, "open") == 0) {
    cJSON *tamed = tame_open(params);
    methods_dispatch(r, tamed);
    cJSON_Delete(tamed);
  } else {
    methods_dispatch(r, params);
  }
}

static void feed_line(const uint8_t *data, size_t len) {
  char *line = malloc(len + 1);
  memcpy(line, data, len);
  line[len] = '\0';
  if (strspn(line, " \t\r") != len) {   /* blank lines are ignored (envelope.c) */
    bool refused = refused_as_text(line, len);
    if (!refused) expect_line(line, len);
    envelope_decode(line, len, serve);
    drain_replies(refused);
  }
  free(line);
}

/* ===== the loop ===== */

static bool deadline_passed;
static uv_timer_t deadline;   /* run_until's: not counted among the open handles */

static void on_deadline(uv_timer_t *t) {
  (void)t;
  deadline_passed = true;
}

/* Runs the loop until done() or ms pass. */
static void run_until(bool (*done)(void), unsigned ms) {
  uv_loop_t *loop = provider_ctx()->loop;
  uv_timer_init(loop, &deadline);
  deadline_passed = false;
  /* Repeating: a loop turn that runs the timer before it polls must still find one, or the poll waits for good. */
  uv_timer_start(&deadline, on_deadline, ms, 5);
  drain_replies(false);
  while (!done() && !deadline_passed) {
    uv_run(loop, UV_RUN_ONCE);
    drain_replies(false);
  }
  uv_close((uv_handle_t *)&deadline, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  drain_replies(false);
}

static void count_handle(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h) && h != (uv_handle_t *)&deadline) ++*(unsigned *)arg;
}

/* The loop's open handles: a process, an archive's worker, a timer of a request each hold one. */
static unsigned open_handles(void) {
  unsigned n = 0;
  uv_walk(provider_ctx()->loop, count_handle, &n);
  return n;
}

static unsigned resting_handles;   /* open_handles() with only s1 open and nothing in flight */

/*
** Every request answered and everything they started gone: the threads
** of archives joined too, so that the leak check after the input sees
** no worker halfway through freeing its archive.
*/
static bool all_answered(void) {
  return outstanding() == 0 && open_handles() <= resting_handles;
}

/* ===== the session every input starts with ===== */

static bool base_open_answered(void) {
  return tally_of("\"fuzz-base\"")->terminals > 0;
}

static void open_base_session(void) {
  sessions_free();   /* ids start again: the new session is s1 */
  clear_tallies();
  cJSON *params = cJSON_Parse("{\"profile\": {\"provider\": \"local\", \"name\": \"default\"}}");
  tally_of("\"fuzz-base\"")->expected = 1;
  methods_dispatch(request_new(strdup("\"fuzz-base\""), "open"), params);
  cJSON_Delete(params);
  run_until(base_open_answered, CLOSE_MS);
  session *s = session_first();
  if (!s || strcmp(s->id, "s1") != 0 || s->next) fuzz_fail("the harness's session did not open as s1");
  resting_handles = open_handles();
  clear_tallies();
  changed = false;
}

/* Removes everything in the directory at path. */
static void empty_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) fuzz_fail("cannot read %s", path);
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    int rc = tree_remove(dirfd(d), e->d_name);
    if (rc < 0) fuzz_fail("cannot remove %s/%s: %s", path, e->d_name, strerror(-rc));
  }
  closedir(d);
}

static bool base_session_as_it_was(void) {
  session *s = session_first();
  return s && strcmp(s->id, "s1") == 0 && !s->next;
}

/* ===== set-up ===== */

static void make_dir(char *path, size_t size, const char *name) {
  snprintf(path, size, "%s/%s", dirs.base, name);
  if (mkdir(path, 0700) != 0) fuzz_fail("cannot make %s", path);
}

/* `FUZZER keeper ROOT`: the provider starts its keeper as its own binary (keeper.h). */
static void be_keeper_if_asked(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "keeper") == 0) exit(keeper_main(argc, argv));
}

/* At exit: every session closed, the provider's root and the harness's directories removed. */
static void clean_up(void) {
  sessions_close_all();
  tree_remove(AT_FDCWD, dirs.base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  be_keeper_if_asked(*argc, *argv);
  show_replies = getenv("FUZZ_SHOW") != NULL;
  const char *tmp = getenv("TMPDIR");
  snprintf(dirs.base, sizeof dirs.base, "%s/fuzz-provider.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dirs.base)) fuzz_fail("cannot make a directory in %s", tmp);
  make_dir(dirs.run, sizeof dirs.run, "run");
  make_dir(dirs.ws, sizeof dirs.ws, "ws");
  snprintf(dirs.canary, sizeof dirs.canary, "%s/canary", dirs.base);
  tree_listing_make_canary(dirs.canary);
  setenv("XDG_RUNTIME_DIR", dirs.run, 1);   /* where the provider makes its root (root.c) */
  unsetenv("SMOLWF_PROFILES");
  char err[1024];
  if (profiles_load(NULL, err, sizeof err) < 0) fuzz_fail("%s", err);
  signal(SIGPIPE, SIG_IGN);
  provider *ctx = provider_ctx();
  spawn_setup_init(&ctx->spawn, &ctx->sched);
  strays_init();
  ctx->loop = uv_default_loop();
  open_base_session();
  dirs.canary_before = tree_listing(dirs.canary);
  dirs.base_before = tree_listing_top(dirs.base);
  atexit(clean_up);
  return 0;
}

/* ===== one input ===== */

static void check_tallies(void) {
  if (ids_overflow) return;
  for (size_t i = 0; i < ntallies; i++) {
    const tally *t = &tallies[i];
    if (t->terminals != t->expected)
      fuzz_fail("id %s: %d request(s), %d terminal replies", t->key, t->expected, t->terminals);
    if (t->event_after_end) fuzz_fail("id %s: an event after its terminal reply", t->key);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!base_session_as_it_was()) open_base_session();
  clear_tallies();
  stopped = false;
  for (size_t at = 0; at < size && !stopped;) {
    const uint8_t *nl = memchr(data + at, '\n', size - at);
    size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
    feed_line(data + at, len);
    at += len + 1;
  }
  run_until(all_answered, SETTLE_MS);
  /* Something still open (an archive waiting for its next chunk, a process) is ended with its session. */
  if (changed || !all_answered() || !base_session_as_it_was()) {
    close_every_session();
    run_until(all_answered, CLOSE_MS);
  } else if (wrote) {
    empty_dir(session_first()->workspace_host);
    empty_dir(session_first()->tmp_host);
  }
  wrote = false;
  check_tallies();
  tree_listing_expect(dirs.canary, dirs.canary_before, "the canary beside the provider's root");
  tree_listing_expect_top(dirs.base, dirs.base_before, "the directory around the provider's root");
  clear_tallies();
  return 0;
}
