/*
** The three reply lines of every exec, recognised in the exact bytes the
** bundled provider (and the bench provider) writes them:
**   {"id":N,"event":{"type":"started","process_id":"WORD"}}
**   {"id":N,"event":{"type":"exited","exit_code":N}}
**   {"id":N,"result":{"exit_code":N,"stdout_base64":"","stderr_base64":""}}
** N a JSON integer without sign, fraction or exponent (0, or a digit 1-9
** and at most 14 more digits), WORD one or more of [A-Za-z0-9_-]. A line
** that is byte for byte one of these means exactly what cJSON would make
** of it; any other spelling of the same message (spaces, other member
** order, escapes, more members) is left to cJSON (conn.c), so what the
** host makes of a reply never depends on its spelling. This is a
** recogniser of three fixed strings with holes, not a parser: it accepts
** nothing cJSON would reject. Parsing these lines was most of the host's
** cost of an exec.
**
** No Lua and no state: spec/plain_line_spec.lua checks the equivalence
** through a provider that writes every message in many spellings, and a
** fuzzer can compare plain_line_match with cJSON on any input.
*/
#include "plain_line.h"

#include <string.h>

/* A JSON integer as the provider writes it (see above); NULL when p has none. */
static const char *integer(const char *p, const char *end, long long *v) {
  if (p == NULL || p >= end || *p < '0' || *p > '9') return NULL;
  const char *start = p;
  long long n = 0;
  if (*p == '0') {
    p++;
  } else {
    while (p < end && *p >= '0' && *p <= '9' && p - start < 15) n = n * 10 + (*p++ - '0');
  }
  if (p < end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E')) return NULL;
  *v = n;
  return p;
}

static const char *literal(const char *p, const char *end, const char *lit, size_t n) {
  return p != NULL && (size_t)(end - p) >= n && memcmp(p, lit, n) == 0 ? p + n : NULL;
}

#define LIT(s) s, sizeof(s) - 1

static int word_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
         ch == '-';
}

static int started(const char *p, const char *end, plain_line *out) {
  const char *word = p;
  while (p < end && word_char(*p)) p++;
  if (p == word || literal(p, end, LIT("\"}}")) != end) return 0;
  out->kind = PLAIN_STARTED;
  out->process_id = word;
  out->process_id_len = (size_t)(p - word);
  return 1;
}

static int exit_code_then(const char *p, const char *end, const char *rest, size_t n, int kind,
                          plain_line *out) {
  long long code;
  if ((p = integer(p, end, &code)) == NULL || literal(p, end, rest, n) != end) return 0;
  out->kind = kind;
  out->exit_code = code;
  return 1;
}

int plain_line_match(const char *line, size_t len, plain_line *out) {
  const char *end = line + len, *p = literal(line, end, LIT("{\"id\":"));
  out->kind = PLAIN_NONE;
  if ((p = integer(p, end, &out->id)) == NULL) return 0;
  const char *q = literal(p, end, LIT(",\"result\":{\"exit_code\":"));
  if (q != NULL) return exit_code_then(q, end, LIT(",\"stdout_base64\":\"\",\"stderr_base64\":\"\"}}"), PLAIN_RESULT, out);
  p = literal(p, end, LIT(",\"event\":{\"type\":\""));
  if ((q = literal(p, end, LIT("started\",\"process_id\":\""))) != NULL) return started(q, end, out);
  if ((q = literal(p, end, LIT("exited\",\"exit_code\":"))) != NULL) return exit_code_then(q, end, LIT("}}"), PLAIN_EXITED, out);
  return 0;
}
