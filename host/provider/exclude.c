/*
** Exclude patterns (see exclude.h).
*/
#define _GNU_SOURCE
#include "exclude.h"

#include <fnmatch.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static bool has_dotdot(const char *p) {
  for (const char *c = p; *c;) {
    size_t n = strcspn(c, "/");
    if (n == 2 && c[0] == '.' && c[1] == '.') return true;
    c += n;
    while (*c == '/') c++;
  }
  return false;
}

bool excludes_add(excludes *x, const char *pattern, const char **why) {
  exclude_rule r = {0};
  if (*pattern == '!') { r.negated = true; pattern++; }
  size_t len = strlen(pattern);
  if (len >= PATH_MAX) { *why = "is longer than PATH_MAX"; return false; }
  while (len > 0 && pattern[len - 1] == '/') { r.dir_only = true; len--; }
  const char *start = pattern;
  while (*start == '/' && len > 0) { start++; len--; }
  if (len == 0) { *why = "names nothing"; return false; }
  r.pattern = strndup(start, len);
  if (!r.pattern) abort();
  if (has_dotdot(r.pattern)) { free(r.pattern); *why = "has a `..` component"; return false; }
  r.anchored = start != pattern || strchr(r.pattern, '/') != NULL;
  exclude_rule *grown = realloc(x->rules, (x->n + 1) * sizeof *grown);
  if (!grown) abort();
  x->rules = grown;
  x->rules[x->n++] = r;
  return true;
}

/* Does the one component [c, c+n) match the pattern component [p, p+m)? */
static bool component_match(const char *p, size_t m, const char *c, size_t n) {
  char pat[NAME_MAX * 4 + 1], name[NAME_MAX + 1];
  if (m >= sizeof pat || n >= sizeof name) return false;
  memcpy(pat, p, m);
  pat[m] = '\0';
  memcpy(name, c, n);
  name[n] = '\0';
  return fnmatch(pat, name, 0) == 0;
}

/* Matches pattern p against path s, both at the start of a component. */
static bool path_match(const char *p, const char *s) {
  if (strcmp(p, "**") == 0) return *s != '\0';
  if (strncmp(p, "**/", 3) == 0) {
    for (const char *t = s;; t++) {
      if (path_match(p + 3, t)) return true;
      t = strchr(t, '/');
      if (!t) return false;
    }
  }
  size_t m = strcspn(p, "/"), n = strcspn(s, "/");
  if (!component_match(p, m, s, n)) return false;
  if (!p[m]) return !s[n];
  if (!s[n]) return false;
  return path_match(p + m + 1, s + n + 1);
}

static bool rule_match(const exclude_rule *r, const char *rel, bool is_dir) {
  if (r->dir_only && !is_dir) return false;
  if (r->anchored) return path_match(r->pattern, rel);
  const char *base = strrchr(rel, '/');
  return path_match(r->pattern, base ? base + 1 : rel);
}

bool excludes_match(const excludes *x, const char *rel, bool is_dir) {
  bool excluded = false;
  for (size_t i = 0; i < x->n; i++)
    if (rule_match(&x->rules[i], rel, is_dir)) excluded = !x->rules[i].negated;
  return excluded;
}

bool excludes_all_literal(const excludes *x) {
  for (size_t i = 0; i < x->n; i++) {
    const exclude_rule *r = &x->rules[i];
    if (r->negated || !r->anchored || strpbrk(r->pattern, "*?[\\")) return false;
  }
  return true;
}

void excludes_free(excludes *x) {
  for (size_t i = 0; i < x->n; i++) free(x->rules[i].pattern);
  free(x->rules);
  x->rules = NULL;
  x->n = 0;
}
