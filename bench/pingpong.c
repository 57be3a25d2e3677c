/*
** smolwf-bench-pingpong [N]: the baseline for the host's round trip. A
** parent and a forked child exchange JSON Lines over a pipe pair: the
** parent writes the request line smolwf writes for sb:exec{"true"}, the
** child parses it with cJSON and answers an exec-shaped result, the
** parent parses that and checks the id.
** Prints the median and mean microseconds per round trip.
*/
#include <cjson/cJSON.h>
#include <stdint.h>
#include <sys/wait.h>

#include "bench_io.h"
#include "clock.h"
#include "median.h"

static const char *REQUEST =
  "{\"id\":%ld,\"method\":\"exec\",\"params\":{\"session\":{\"id\":\"bench_1\",\"cwd\":null,"
  "\"capabilities\":{\"exec\":true,\"output_limit\":true}},\"argv\":[\"true\"],\"cwd\":null,"
  "\"env\":null,\"stdin_base64\":null,\"max_output_bytes\":0}}\n";

typedef struct peer { outbuf out; long last_id; } peer;

static long id_of(const char *line, size_t len) {
  cJSON *msg = cJSON_ParseWithLength(line, len);
  if (msg == NULL) { fprintf(stderr, "pingpong: bad JSON\n"); exit(1); }
  long id = (long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(msg, "id"));
  cJSON_Delete(msg);
  return id;
}

static int child_line(void *ctx, char *line, size_t len) {
  peer *p = ctx;
  char reply[160];
  int n = snprintf(reply, sizeof reply,
    "{\"id\":%ld,\"result\":{\"exit_code\":0,\"stdout_base64\":\"\",\"stderr_base64\":\"\"}}\n",
    id_of(line, len));
  out_put(&p->out, reply, (size_t)n);
  return 0;
}

static int parent_line(void *ctx, char *line, size_t len) {
  ((peer *)ctx)->last_id = id_of(line, len);
  return 1;
}

static void child(int in, int out) {
  peer p = {{out, malloc(65536), 0, 65536}, 0};
  linebuf lb;
  linebuf_init(&lb, 1 << 20);
  while (read_lines(in, &lb, child_line, &p)) out_flush(&p.out);
  linebuf_free(&lb);
  free(p.out.buf);
  _exit(0);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 20000;
  int to_child[2], to_parent[2];
  if (n < 1 || pipe(to_child) != 0 || pipe(to_parent) != 0) { perror("pingpong"); return 1; }
  pid_t pid = fork();
  if (pid == 0) { close(to_child[1]); close(to_parent[0]); child(to_child[0], to_parent[1]); }
  close(to_child[0]); close(to_parent[1]);
  peer p = {{to_child[1], malloc(4096), 0, 4096}, 0};
  linebuf lb;
  linebuf_init(&lb, 1 << 20);
  double *t = malloc(sizeof(double) * (size_t)n), total = 0;
  char line[512];
  for (long i = 0; i < n; i++) {
    double t0 = now_us();
    out_put(&p.out, line, (size_t)snprintf(line, sizeof line, REQUEST, i));
    out_flush(&p.out);
    p.last_id = -1;
    while (p.last_id < 0 && read_lines(to_parent[0], &lb, parent_line, &p)) {}
    if (p.last_id != i) { fprintf(stderr, "pingpong: wrong id\n"); return 1; }
    t[i] = now_us() - t0;
    total += t[i];
  }
  close(to_child[1]);
  waitpid(pid, NULL, 0);
  printf("pingpong_median_us %.2f\npingpong_mean_us %.2f\n", bench_median(t, (size_t)n), total / (double)n);
  free(t); free(p.out.buf); linebuf_free(&lb);
  return 0;
}
