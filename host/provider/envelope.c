/*
** Decoding request lines (see envelope.h).
**
** cJSON is lenient where leniency would change a request's meaning, so
** the line is checked around it: a request either means exactly what its
** text says or is refused with invalid_request naming the problem, and
** the refusal carries the request's id whenever the id itself is sound
** (a client cannot match a null id to its request).
**   - not UTF-8: JSON text is UTF-8, and a name that is not could not be
**     echoed in a reply (names of files that are not UTF-8 travel as
**     base64: docs/protocol.md);
**   - a NUL character, raw or as \u0000: C strings end there, so
**     "a\u0000b" would be read as "a";
**   - a duplicate key: cJSON finds the first, other decoders the last;
**   - two values on one line, or text after the object;
**   - an integer id at or beyond 2^53, which a double cannot hold exactly.
** The request's tree lives only until its handler returns, so cJSON builds
** it in the provider's json_arena (json_arena.h); what a handler keeps, it
** copies (cJSON_Duplicate) with plain malloc.
*/
#define _GNU_SOURCE
#include "envelope.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "json_arena.h"
#include "json_rules.h"
#include "utf8.h"

/* Integer ids must stay below 2^53: from there on, two ids read as the same double. */
#define ID_LIMIT 9007199254740992.0
/* How much of a bad line an error message quotes. */
#define QUOTE_BYTES 80

/* ===== the line's own problems ===== */

/* What is wrong with the line as text, written into why; false when nothing is. */
static bool line_problem(const char *line, size_t len, char *why, size_t size) {
  size_t bad;
  if (!utf8_valid(line, len, &bad)) {
    snprintf(why, size, "the line is not valid UTF-8 (byte 0x%02x at offset %zu)", (unsigned char)line[bad], bad);
    return true;
  }
  const char *nul = memchr(line, '\0', len);
  if (nul) {
    snprintf(why, size, "the line holds a NUL byte (at offset %zu)", (size_t)(nul - line));
    return true;
  }
  if (json_each_nul_escape((char *)line, len, NULL)) {
    snprintf(why, size, "a string holds \\u0000 (NUL), which no id, method, path or argument may contain");
    return true;
  }
  return false;
}

/* ===== the id ===== */

/* The id as it must be echoed, or NULL when it is neither a sound string nor an integer below 2^53. */
static char *id_to_json(const cJSON *id) {
  if (cJSON_IsString(id)) {
    size_t n = strlen(id->valuestring);
    return utf8_valid(id->valuestring, n, NULL) ? cJSON_PrintUnformatted(id) : NULL;
  }
  if (!cJSON_IsNumber(id)) return NULL;
  double d = id->valuedouble;
  if (d != floor(d) || fabs(d) >= ID_LIMIT) return NULL;
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)d);
  return strdup(buf);
}

static void escape_to_soh(char *line, size_t at) {
  line[at + 4] = '1';   /* \u0000 -> \u0001: the same length, so the same offsets */
}

/* A copy of the line with every NUL, raw or escaped, made U+0001: it parses in step with the line. */
static char *shadow_of(const char *line, size_t len) {
  char *shadow = malloc(len + 1);
  if (!shadow) abort();
  memcpy(shadow, line, len + 1);
  for (char *nul = memchr(shadow, '\0', len); nul; nul = memchr(nul, '\0', len - (size_t)(nul - shadow)))
    *nul = '\x01';
  json_each_nul_escape(shadow, len, escape_to_soh);
  return shadow;
}

/* How many members of obj are named key. */
static size_t members_named(const cJSON *obj, const char *key) {
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) n += strcmp(c->string, key) == 0;
  return n;
}

/*
** The echo of msg's id, or NULL. Where the line holds a NUL, the id is
** sound only if it reads the same with the NULs made U+0001 (the copy
** `shadow`, parsed in step with the line): else it held one, and was cut.
*/
static char *echo_id(const cJSON *msg, const cJSON *shadow) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  if (!id || members_named(msg, "id") > 1) return NULL;
  if (shadow && cJSON_IsString(id)) {
    const cJSON *seen = cJSON_GetObjectItemCaseSensitive(shadow, "id");
    if (!cJSON_IsString(seen) || strcmp(seen->valuestring, id->valuestring) != 0) return NULL;
  }
  return id_to_json(id);
}

/* ===== replies for what cannot be served ===== */

/* An error reply with id null, for a line whose id cannot be read (or no line at all). */
static void reject_line(const char *message, const char *line, size_t len) {
  int quote = line ? (int)utf8_prefix(line, len, QUOTE_BYTES) : 0;
  reply_error(request_new(NULL, ""), "invalid_request", "%s%s%.*s", message, line ? ": " : "", quote, line ? line : "");
}

void envelope_reject(const char *message) {
  reject_line(message, NULL, 0);
}

/* ===== one request ===== */

/* Checks the envelope of one request (why: what the line's text already makes wrong), then hands it on. */
static void decode_message(const cJSON *msg, const cJSON *shadow, const char *why, envelope_handler handler) {
  char *id_json = echo_id(msg, shadow);
  if (!id_json) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    if (why) reject_line(why, NULL, 0);
    else if (id && members_named(msg, "id") > 1) reject_line("duplicate key `id`", NULL, 0);
    else reject_line("request `id` must be a string or an integer of magnitude below 2^53", NULL, 0);
    return;
  }
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
  const char *name = cJSON_IsString(method) && !why ? method->valuestring : "";
  request *r = request_new(id_json, strlen(name) < REQUEST_METHOD_MAX ? name : "");
  const char *dup = why ? NULL : json_duplicate_key(msg);
  if (why)
    reply_error(r, "invalid_request", "%s", why);
  else if (dup)
    reply_error(r, "invalid_request", "duplicate key `%s`: each key may occur once in an object", dup);
  else if (!cJSON_IsString(method))
    reply_error(r, "invalid_request", "request field `method` must be a string");
  else if (strlen(name) >= REQUEST_METHOD_MAX)
    reply_error(r, "unknown_method", "unknown method `%.*s...`", (int)utf8_prefix(name, strlen(name), 64), name);
  else if (params && !cJSON_IsObject(params) && !cJSON_IsNull(params))
    reply_error(r, "invalid_request", "%s: field `params` must be an object", r->method);
  else
    handler(r, cJSON_IsObject(params) ? params : NULL);
}

/* ===== a line ===== */

static size_t skip_space(const char *line, size_t at, size_t len) {
  while (at < len && strchr(" \t\r", line[at]) && line[at] != '\0') at++;
  return at;
}

/*
** Every object on the line gets its answer: normally one, served; with
** more than one (or text after it) each is refused, by its own id.
*/
static void decode_values(const char *line, const char *shadow_line, size_t len, const char *why,
                          envelope_handler handler) {
  json_arena *arena = CTX_PART(requests);
  char more[160];
  for (size_t at = skip_space(line, 0, len), count = 0; at < len; count++) {
    const char *end = NULL;
    json_arena_use(arena);
    cJSON *msg = cJSON_ParseWithLengthOpts(line + at, len - at, &end, 0);
    cJSON *shadow = shadow_line && msg ? cJSON_ParseWithLengthOpts(shadow_line + at, len - at, NULL, 0) : NULL;
    json_arena_use(NULL);   /* what the handler builds outlives the request */
    size_t next = msg ? skip_space(line, (size_t)(end - line), len) : len;
    if (!msg && count == 0) reject_line("the line is not valid JSON", why ? NULL : line, len);
    else if (msg && !cJSON_IsObject(msg)) reject_line("the line is not a JSON object", why ? NULL : line, len);
    else if (msg) {
      const char *problem = why;
      if (!problem && (count > 0 || next < len)) {
        snprintf(more, sizeof more, "text after the request (at offset %zu): one request per line, each ended by a newline",
                 count > 0 ? at : next);
        problem = more;
      }
      decode_message(msg, shadow, problem, handler);
    }
    bool object = cJSON_IsObject(msg);
    json_arena_use(arena);
    cJSON_Delete(msg);
    cJSON_Delete(shadow);
    json_arena_use(NULL);
    json_arena_reset(arena);
    if (!object) break;
    at = next;
  }
}

void envelope_decode(const char *line, size_t len, envelope_handler handler) {
  if (strspn(line, " \t\r") == len) return;   /* blank lines are ignored */
  char why[160];
  bool bad = line_problem(line, len, why, sizeof why);
  char *shadow = bad ? shadow_of(line, len) : NULL;
  decode_values(line, shadow, len, bad ? why : NULL, handler);
  free(shadow);
}

void envelope_free(void) {
  free(provider_ctx()->requests);
  provider_ctx()->requests = NULL;
}
