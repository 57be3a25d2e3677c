/*
** Decoding request lines (see envelope.h).
*/
#define _GNU_SOURCE
#include "envelope.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest id that survives a trip through a double (2^53). */
#define MAX_INT_ID 9007199254740992.0

/* The id as it must be echoed, or NULL when it is neither a string nor an integer. */
static char *id_to_json(const cJSON *id) {
  if (cJSON_IsString(id)) return cJSON_PrintUnformatted(id);
  if (!cJSON_IsNumber(id)) return NULL;
  double d = id->valuedouble;
  if (d != floor(d) || fabs(d) > MAX_INT_ID) return NULL;
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)d);
  return strdup(buf);
}

/* An error reply with id null, for a line whose id cannot be read (or no line at all). */
static void reject_line(const char *message, const char *line) {
  reply_error(request_new(NULL, ""), "invalid_request", "%s%s%.80s", message, line ? ": " : "", line ? line : "");
}

void envelope_reject(const char *message) {
  reject_line(message, NULL);
}

/* Checks the envelope of one request, then hands it to handler. */
static void decode_message(const cJSON *msg, envelope_handler handler) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  char *id_json = id ? id_to_json(id) : NULL;
  if (!id_json) { reject_line("request `id` must be a string or an integer", NULL); return; }
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
  request *r = request_new(id_json, cJSON_IsString(method) ? method->valuestring : "");
  if (!cJSON_IsString(method))
    reply_error(r, "invalid_request", "request field `method` must be a string");
  else if (strlen(method->valuestring) >= sizeof r->method)
    reply_error(r, "unknown_method", "unknown method `%.64s...`", method->valuestring);
  else if (params && !cJSON_IsObject(params) && !cJSON_IsNull(params))
    reply_error(r, "invalid_request", "%s: field `params` must be an object", r->method);
  else
    handler(r, cJSON_IsObject(params) ? params : NULL);
}

void envelope_decode(const char *line, size_t len, envelope_handler handler) {
  if (strspn(line, " \t\r") == len) return;   /* blank lines are ignored */
  cJSON *msg = cJSON_ParseWithLength(line, len);
  if (!cJSON_IsObject(msg)) reject_line("line is not a JSON object", line);
  else decode_message(msg, handler);
  cJSON_Delete(msg);
}
