/*
** Serving one connection: request lines from the wire go through the
** envelope to their methods (methods.h); `shutdown` is answered here,
** because it is the connection's end. The provider stops here too, the
** same way whatever the reason (shutdown, end of input, a host that is
** gone, SIGTERM/SIGINT/SIGHUP): no more requests are read, every session
** is closed (its requests in flight answered first), a shutdown gets {},
** and stdout is closed once every line is written.
*/
#ifndef SMOL_SERVER_H
#define SMOL_SERVER_H

#include <uv.h>

/* Starts serving stdin/stdout on loop. 0, or -1 with a message on stderr. */
int server_start(uv_loop_t *loop);

/* Frees what serving still holds, after the loop has ended. */
void server_free(void);

#endif
