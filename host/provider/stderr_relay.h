/*
** What a sandbox writes on its stderr once it runs (the sandbox helper's
** reports: a failure to start a command, a sanitizer's, a fatal error),
** copied to the provider's stderr, line by line, behind a prefix naming
** the session. Reads only what is there (the fd is non-blocking), so a
** sandbox writing much costs the loop a read per wake-up, never a wait.
*/
#ifndef SMOL_STDERR_RELAY_H
#define SMOL_STDERR_RELAY_H

#include <uv.h>

typedef struct stderr_relay stderr_relay;

/* Starts relaying fd (non-blocking; owned from here on) with prefix before each line; NULL (fd closed) if the loop cannot watch it. */
stderr_relay *stderr_relay_start(uv_loop_t *loop, int fd, const char *prefix);

/* Relays what is readable now, then closes the fd; freed once libuv is done. NULL: nothing. */
void stderr_relay_stop(stderr_relay *r);

#endif
