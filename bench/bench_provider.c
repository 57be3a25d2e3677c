/*
** smolwf-bench-provider serve: the smallest provider that lets the host's
** own cost show. exec answers at once with a fixed result, except
** `exec {"argv": ["stream", TOTAL, CHUNK]}`, which streams TOTAL bytes of a
** fixed buffer as stdout events of CHUNK bytes (base64 encoded once), then
** exited and a result with no captured copy. Replies to the requests of
** one read are written together, as a real provider's replies batch up.
*/
#define _GNU_SOURCE  /* F_SETPIPE_SZ */
#include <cjson/cJSON.h>
#include <fcntl.h>

#include "base64.h"
#include "bench_io.h"

static outbuf out = {1, NULL, 0, 1 << 20};
static int done;

static void reply(const char *id_json, const char *body) {
  out_str(&out, "{\"id\":");
  out_str(&out, id_json);
  out_str(&out, body);
  out_put(&out, "\n", 1);
}

/* TOTAL bytes as stdout events of CHUNK bytes each. */
static void stream(const char *id_json, long long total, long chunk) {
  unsigned char *raw = calloc((size_t)chunk, 1);
  char *b64 = malloc(b64_encoded_len((size_t)chunk) + 1);
  if (raw == NULL || b64 == NULL) { perror("bench-provider"); exit(1); }
  for (long i = 0; i < chunk; i++) raw[i] = (unsigned char)('a' + i % 26);
  b64[b64_encode(raw, (size_t)chunk, b64)] = '\0';
  for (long long sent = 0; sent < total; sent += chunk) {
    out_str(&out, "{\"id\":");
    out_str(&out, id_json);
    out_str(&out, ",\"event\":{\"type\":\"stdout\",\"data_base64\":\"");
    out_str(&out, b64);
    out_str(&out, "\"}}\n");
  }
  reply(id_json, ",\"event\":{\"type\":\"exited\",\"exit_code\":0}}");
  reply(id_json, ",\"result\":{\"exit_code\":0,\"stdout_base64\":\"\",\"stderr_base64\":\"\"}}");
  free(raw);
  free(b64);
}

static const char *argv_at(cJSON *params, int i) {
  cJSON *argv = cJSON_GetObjectItemCaseSensitive(params, "argv");
  cJSON *item = cJSON_GetArrayItem(argv, i);
  return cJSON_IsString(item) ? item->valuestring : NULL;
}

static void handle(cJSON *req, const char *id_json) {
  const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "method"));
  cJSON *params = cJSON_GetObjectItemCaseSensitive(req, "params");
  if (method == NULL) method = "";
  if (strcmp(method, "open") == 0) {
    reply(id_json, ",\"result\":{\"id\":\"bench_1\",\"cwd\":null,"
                   "\"capabilities\":{\"exec\":true,\"output_limit\":true}}}");
  } else if (strcmp(method, "exec") == 0 && argv_at(params, 0) && strcmp(argv_at(params, 0), "stream") == 0) {
    const char *total = argv_at(params, 1), *chunk = argv_at(params, 2);
    stream(id_json, total ? atoll(total) : 0, chunk ? atol(chunk) : 65536);
  } else if (strcmp(method, "exec") == 0) {
    reply(id_json, ",\"result\":{\"exit_code\":0,\"stdout_base64\":\"\",\"stderr_base64\":\"\"}}");
  } else {
    reply(id_json, ",\"result\":{}}");
    if (strcmp(method, "shutdown") == 0) done = 1;
  }
}

static int on_line(void *ctx, char *line, size_t len) {
  (void)ctx;
  cJSON *req = cJSON_ParseWithLength(line, len);
  if (req == NULL) return 0;
  char *id_json = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(req, "id"));
  if (id_json != NULL) handle(req, id_json);
  cJSON_free(id_json);
  cJSON_Delete(req);
  return done;
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "serve") != 0) {
    fprintf(stderr, "usage: %s serve\n", argv[0]);
    return 2;
  }
  /* A bigger pipe: fewer wake-ups of the host per streamed megabyte. */
  (void)fcntl(1, F_SETPIPE_SZ, 1 << 20);
  out.buf = malloc(out.cap);
  linebuf lb;
  linebuf_init(&lb, 64u << 20);
  while (!done && read_lines(0, &lb, on_line, NULL)) out_flush(&out);
  out_flush(&out);
  linebuf_free(&lb);
  free(out.buf);
  return 0;
}
