/*
** The envelope of a request line: `{"id": ID, "method": "NAME",
** "params": {...}}` (docs/protocol.md). A line that is not a valid
** request is answered here, with its id when that can be read and with
** id null otherwise; a valid one goes to the handler, which owns the
** request from then on.
*/
#ifndef SMOL_ENVELOPE_H
#define SMOL_ENVELOPE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "reply.h"

/* params is NULL when the request has none; it lives for the call only. */
typedef void (*envelope_handler)(request *r, const cJSON *params);

/* Decodes one line (without its '\n'; line[len] == '\0'). */
void envelope_decode(const char *line, size_t len, envelope_handler handler);

/* An invalid_request with id null, for a problem of the stream rather than of one request. */
void envelope_reject(const char *message);

/* Frees what decoding keeps between lines (at exit). */
void envelope_free(void);

#endif
