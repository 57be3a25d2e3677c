/*
** Can bubblewrap sessions run on this machine? The answer is found once
** (by running the same sandbox a session uses, with `true` inside) and
** cached for the provider's lifetime.
**
** The bwrap program is $SMOLWF_BWRAP when set (tests point it at a missing
** file to see the fail-closed path), else `bwrap` found in $PATH.
*/
#ifndef SMOL_BWRAP_PROBE_H
#define SMOL_BWRAP_PROBE_H

#include <stdbool.h>

/*
** True when bwrap sessions work. Otherwise false, and *why (if not NULL)
** points to a sentence saying why, e.g. "bubblewrap (bwrap) is not
** installed or not in PATH" or "user namespaces are disabled
** (user.max_user_namespaces = 0)". Blocks for the probe on the first call
** (about 10 ms) unless bwrap_probe_then came first.
*/
bool bwrap_usable(const char **why);

/* Has the probe run? */
bool bwrap_probed(void);

/*
** Runs done(data) on the loop once the probe has run: at once when it
** has, else after the probe, which waits for its sandbox on a job's
** thread so the loop keeps serving meanwhile.
*/
void bwrap_probe_then(void (*done)(void *data), void *data);

/* The absolute path of the bwrap program; NULL unless bwrap_usable(). */
const char *bwrap_program(void);

/*
** Ends a probe still running, and waits for it (the provider is stopping:
** a sandbox that hangs must not keep it for the probe's whole timeout).
** A probe gets up to a second to end by itself first, so a describe sent
** just before shutdown or end of input still gets the true answer; one
** killed is cancelled (bwrap_probe_cancelled). Whoever waited for it
** hears, as after any probe.
*/
void bwrap_probe_cancel(void);

/* Did bwrap_probe_cancel end the probe? Then its answer is no answer. */
bool bwrap_probe_cancelled(void);

/* Forgets the answer (at exit). */
void bwrap_probe_free(void);

#endif
