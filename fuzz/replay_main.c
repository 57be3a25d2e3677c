/*
** The replay program of a harness (builds without libFuzzer): runs every
** file named on the command line, and every file in every directory
** named, through LLVMFuzzerTestOneInput, as libFuzzer would run one
** input; a finding aborts, which fails the test.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static size_t replayed;

static void replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(1); }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  if (!buf || ferror(f)) { fprintf(stderr, "%s: cannot read\n", path); exit(1); }
  fclose(f);
  fprintf(stderr, "replay: %s\n", path);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  replayed++;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static void replay(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) { perror(path); exit(1); }
  if (!S_ISDIR(st.st_mode)) { replay_file(path); return; }
  struct dirent **names;
  int n = scandir(path, &names, NULL, by_name);
  if (n < 0) { perror(path); exit(1); }
  for (int i = 0; i < n; i++) {
    if (names[i]->d_name[0] != '.') {
      char *child;
      if (asprintf(&child, "%s/%s", path, names[i]->d_name) < 0) exit(1);
      replay(child);
      free(child);
    }
    free(names[i]);
  }
  free(names);
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  for (int i = 1; i < argc; i++) replay(argv[i]);
  printf("replayed %zu inputs\n", replayed);
  return 0;
}
