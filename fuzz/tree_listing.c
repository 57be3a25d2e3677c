/*
** Directory listings (see tree_listing.h).
*/
#define _GNU_SOURCE
#include "tree_listing.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

typedef struct text {
  char *s;
  size_t len, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
  char *piece;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&piece, fmt, ap);
  va_end(ap);
  if (n < 0) abort();
  if (t->len + (size_t)n + 1 > t->cap) {
    t->cap = (t->len + (size_t)n + 1) * 2;
    t->s = realloc(t->s, t->cap);
    if (!t->s) abort();
  }
  memcpy(t->s + t->len, piece, (size_t)n + 1);
  t->len += (size_t)n;
  free(piece);
}

static void write_file(const char *path, const char *content) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(content, f) < 0 || fclose(f) != 0) fuzz_fail("cannot write %s", path);
}

void tree_listing_make_canary(const char *path) {
  char p[4200];
  if (mkdir(path, 0755) != 0) fuzz_fail("cannot make %s", path);
  snprintf(p, sizeof p, "%s/file", path);
  write_file(p, "canary\n");
  snprintf(p, sizeof p, "%s/dir", path);
  if (mkdir(p, 0755) != 0) fuzz_fail("cannot make %s", p);
  snprintf(p, sizeof p, "%s/dir/inner", path);
  write_file(p, "inner canary\n");
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int not_dots(const struct dirent *e) {
  return strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
}

static void list_entry(text *t, const char *path, const char *shown, int depth, int recurse);

static void list_dir(text *t, const char *path, const char *shown, int depth, int recurse) {
  struct dirent **names;
  int n = scandir(path, &names, not_dots, by_name);
  if (n < 0) { add(t, "%s: unreadable\n", shown); return; }
  for (int i = 0; i < n; i++) {
    char child[4200], child_shown[4200];
    snprintf(child, sizeof child, "%s/%s", path, names[i]->d_name);
    snprintf(child_shown, sizeof child_shown, "%s/%s", shown, names[i]->d_name);
    list_entry(t, child, child_shown, depth + 1, recurse);
    free(names[i]);
  }
  free(names);
}

static void list_entry(text *t, const char *path, const char *shown, int depth, int recurse) {
  struct stat st;
  if (lstat(path, &st) != 0) { add(t, "%s: gone\n", shown); return; }
  if (!recurse) {
    add(t, "%s %o\n", shown, st.st_mode & S_IFMT);
  } else {
    add(t, "%s mode %o size %lld mtime %lld.%09ld", shown, st.st_mode, (long long)st.st_size,
        (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = readlink(path, target, sizeof target - 1);
      add(t, " -> %.*s", (int)(n > 0 ? n : 0), target);
    }
    add(t, "\n");
  }
  if (S_ISDIR(st.st_mode) && (recurse || depth == 0)) list_dir(t, path, shown, depth, recurse);
}

char *tree_listing(const char *path) {
  text t = {0};
  list_entry(&t, path, ".", 0, 1);
  return t.s;
}

char *tree_listing_top(const char *path) {
  text t = {0};
  list_entry(&t, path, ".", 0, 0);
  return t.s;
}

static void expect(char *now, const char *path, const char *before, const char *what) {
  if (strcmp(now, before) != 0) fuzz_fail("%s (%s) changed:\nbefore:\n%safter:\n%s", what, path, before, now);
  free(now);
}

void tree_listing_expect(const char *path, const char *before, const char *what) {
  expect(tree_listing(path), path, before, what);
}

void tree_listing_expect_top(const char *path, const char *before, const char *what) {
  expect(tree_listing_top(path), path, before, what);
}
