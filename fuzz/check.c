/*
** The harnesses' shared assertions (see check.h).
*/
#include "check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fuzz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fuzz: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

/*
** The harnesses' own UTF-8 check, written apart from host/common/utf8.c on
** purpose: it is the oracle for that code's output, so a bug there must
** not be able to pass its own test.
**
** The length of the sequence that starts with lead byte c, 0 for a byte no sequence starts with.
*/
static size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return 2;
  if (c >= 0xe0 && c <= 0xef) return 3;
  if (c >= 0xf0 && c <= 0xf4) return 4;
  return 0;
}

bool fuzz_utf8_valid(const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < n;) {
    size_t len = sequence_length(s[i]);
    if (len == 0 || i + len > n) return false;
    unsigned long cp = len == 1 ? s[i] : (unsigned long)(s[i] & (0x7f >> len));
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    static const unsigned long least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

cJSON *fuzz_check_reply(const char *line, size_t len) {
  if (!fuzz_utf8_valid(line, len)) fuzz_fail("reply line is not UTF-8: %.*s", (int)len, line);
  if (memchr(line, '\0', len)) fuzz_fail("reply line holds a NUL byte");
  const char *end = NULL;
  cJSON *msg = cJSON_ParseWithLengthOpts(line, len, &end, 0);
  if (!cJSON_IsObject(msg)) fuzz_fail("reply line is not a JSON object: %.*s", (int)len, line);
  if ((size_t)(end - line) != len) fuzz_fail("reply line has text after its object: %.*s", (int)len, line);
  if (!cJSON_GetObjectItemCaseSensitive(msg, "id")) fuzz_fail("reply line has no id: %.*s", (int)len, line);
  int kinds = 0;
  static const char *const names[] = {"result", "error", "event"};
  for (size_t i = 0; i < 3; i++) kinds += cJSON_GetObjectItemCaseSensitive(msg, names[i]) != NULL;
  if (kinds != 1) fuzz_fail("reply line needs exactly one of result, error, event: %.*s", (int)len, line);
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
  if (err && (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "code")) ||
              !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "message"))))
    fuzz_fail("error reply without a string code and message: %.*s", (int)len, line);
  return msg;
}

char *fuzz_id_key(const cJSON *id) {
  if (cJSON_IsNull(id)) return strdup("null");
  if (cJSON_IsString(id)) return fuzz_utf8_valid(id->valuestring, strlen(id->valuestring)) ? cJSON_PrintUnformatted(id) : NULL;
  if (!cJSON_IsNumber(id)) return NULL;
  double d = id->valuedouble;
  if (d != floor(d) || fabs(d) >= 9007199254740992.0) return NULL;
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)d);
  return strdup(buf);
}
