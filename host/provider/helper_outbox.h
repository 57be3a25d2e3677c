/*
** The provider's end of a sandbox helper's control channel (a
** SOCK_SEQPACKET socket; sandbox_helper.h), written without ever waiting
** on the loop: a message the socket has no room for is queued, with
** copies of its descriptors, and sent in order once the socket is
** writable again. A helper that takes none of them for `deadline_ms` is
** stuck (stopped, or spinning): the owner hears so, as it hears of a
** send that failed, and the session's sandbox is ended. Only the helper
** of that session is waited for; every other session goes on.
*/
#ifndef SMOL_HELPER_OUTBOX_H
#define SMOL_HELPER_OUTBOX_H

#include <stddef.h>
#include <uv.h>

typedef struct helper_outbox helper_outbox;

/* The channel cannot be used any more: -ETIMEDOUT (stuck for the deadline) or a send's -errno. */
typedef void (*outbox_broken_fn)(void *data, int err);

/* An outbox for fd (not owned; made non-blocking here). */
helper_outbox *outbox_new(uv_loop_t *loop, int fd, int deadline_ms, outbox_broken_fn broken, void *data);

/*
** Sends msg with up to three fds (the caller keeps its own), or queues it
** behind what waits. 0; or -errno when it can be neither sent nor queued
** (nothing was sent; after a failed send the channel takes no more).
** Only what fails later, for a queued message, goes to `broken`.
*/
int outbox_send(helper_outbox *o, const void *msg, size_t len, const int *fds, int nfds);

/* How many messages wait for room. */
size_t outbox_waiting(const helper_outbox *o);

/* Drops what waits and lets go of the fd (which the caller may close right after); freed once libuv is done. */
void outbox_close(helper_outbox *o);

#endif
