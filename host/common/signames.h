/*
** Signal names as the protocol writes them: without "SIG" ("TERM",
** "KILL"). The one table of them, shared by the host and the provider.
*/
#ifndef SMOL_SIGNAMES_H
#define SMOL_SIGNAMES_H

/* The signal number, or 0 when the name is unknown; accepts "TERM" and "SIGTERM". */
int signal_from_name(const char *name);

/* The name without "SIG", or NULL when the number has none here. */
const char *signal_to_name(int signo);

#endif
