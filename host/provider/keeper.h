/*
** The keeper: what ends a local session's processes when the provider
** itself is killed (SIGKILL) and cannot. Commands of a local session run
** as the provider's own children, and its other ways of ending them
** (close, shutdown, SIGTERM: strays.h) all need the provider alive; only
** its direct children die with it (PR_SET_PDEATHSIG), not what they
** started. So with the provider's root, a small process of its own binary
** (`smolwf-provider keeper ROOT`, in its own process group) is started
** and blocks reading a pipe whose only write end the provider holds. When
** the provider ends, however it ends, the read returns and the keeper
** kills every process whose environment has a TMPDIR below ROOT (every
** command of a local session gets its session's own), until none is
** left, then exits. Bubblewrap sessions need none of it: their sandbox
** dies with the provider, and their TMPDIR is /tmp.
*/
#ifndef SMOL_KEEPER_H
#define SMOL_KEEPER_H

/* Starts the keeper of root; returns the write end of its pipe (keep it open), or -1. */
int keeper_start(const char *root);

/* `smolwf-provider keeper ROOT`. */
int keeper_main(int argc, char **argv);

#endif
