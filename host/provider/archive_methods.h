/*
** The `archive` extension (docs/protocol.md): tar archives streamed into a
** session (write_archive, extracted by unpack.c) and out of it
** (read_archive, packed by pack.c), in chunks, with abort_archive and
** read_archive_ack.
**
** Extracting and packing take time that grows with the archive, so each
** archive in flight has a worker thread of its own; the loop only decodes
** and encodes chunks (bounded) and answers requests. Between the two, a
** chunk queue of a few chunks bounds memory on both sides: a write's
** chunk is answered once the worker takes it, so a client that waits for
** those answers cannot run ahead; a read's worker waits while its chunks
** are not sent, and the loop stops sending while the wire is congested or
** while the client has not acknowledged enough of them (its window).
**
** The archives in flight are this module's (the context's part); a
** session's are ended when it closes (archives_close_session).
*/
#ifndef SMOL_ARCHIVE_METHODS_H
#define SMOL_ARCHIVE_METHODS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "reply.h"
#include "session.h"

void method_write_archive(request *r, session *s, const cJSON *params);
void method_read_archive(request *r, session *s, const cJSON *params);
void method_read_archive_ack(request *r, session *s, const cJSON *params);
void method_abort_archive(request *r, session *s, const cJSON *params);

/* Stops s's archives (their workers joined) and answers their requests with unknown_session. */
void archives_close_session(session *s);

/* The wire's congestion: while on, no read_archive chunk is sent. */
void archives_set_paused(bool on);

/* Frees the table (at exit, when no archive is left). */
void archives_free(void);

#endif
