/*
** UTF-8 checks (see utf8.h).
*/
#include "utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The length of the valid sequence at s (at most n bytes left), or 0 when it is not one. */
static size_t sequence_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t min, cp;
  if (c >= 0xC2 && c <= 0xDF) { len = 2; min = 0x80; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { len = 3; min = 0x800; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { len = 4; min = 0x10000; cp = c & 0x07; }
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

size_t utf8_sequence_len(const char *s, size_t n) {
  return n == 0 ? 0 : sequence_len((const unsigned char *)s, n);
}

/* Whether the 8 bytes at p are all ASCII. */
static bool ascii8(const unsigned char *p) {
  uint64_t w;
  memcpy(&w, p, 8);
  return (w & 0x8080808080808080ull) == 0;
}

bool utf8_valid(const char *s, size_t n, size_t *bad) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    /* the common case, base64 payloads above all: ASCII, 8 bytes a step */
    if (i + 8 <= n && ascii8(u + i)) { i += 8; continue; }
    if (u[i] < 0x80) { i++; continue; }
    size_t len = sequence_len(u + i, n - i);
    if (len == 0) {
      if (bad) *bad = i;
      return false;
    }
    i += len;
  }
  return true;
}

/* How many bytes a sequence starting with lead takes (1 for anything that cannot start one). */
static size_t lead_len(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

size_t utf8_complete(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  /* the last character starts at most 3 bytes back: find its lead byte */
  for (size_t back = 1; back <= 4 && back <= n; back++) {
    unsigned char c = u[n - back];
    if ((c & 0xC0) == 0x80) continue;   /* a continuation byte: look further back */
    return lead_len(c) > back ? n - back : n;
  }
  return n;
}

size_t utf8_prefix(const char *s, size_t n, size_t max) {
  return n <= max ? n : utf8_complete(s, max);
}

size_t utf8_repaired_len(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t len = 0;
  for (size_t i = 0; i < n;) {
    size_t seq = sequence_len(u + i, n - i);
    len += seq == 0 ? 3 : seq;
    i += seq == 0 ? 1 : seq;
  }
  return len;
}

size_t utf8_repair_into(const char *s, size_t n, char *out) {
  static const char replacement[] = "\xEF\xBF\xBD";   /* U+FFFD */
  const unsigned char *u = (const unsigned char *)s;
  char *p = out;
  for (size_t i = 0; i < n;) {
    size_t len = sequence_len(u + i, n - i);
    if (len == 0) { memcpy(p, replacement, 3); p += 3; i++; continue; }
    memcpy(p, s + i, len);
    p += len;
    i += len;
  }
  return (size_t)(p - out);
}

char *utf8_repair(const char *s, size_t n, size_t *outlen) {
  char *out = malloc(3 * n + 1);   /* each bad byte becomes 3 */
  if (!out) return NULL;
  size_t len = utf8_repair_into(s, n, out);
  out[len] = '\0';
  if (outlen) *outlen = len;
  return out;
}
