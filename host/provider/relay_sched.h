/*
** The provider and the sandbox helper are relays: while no command of
** theirs runs, the only thing that wakes them is a client's request, and
** the client sleeps right after writing it. Idle, they run as SCHED_BATCH
** so that wake-up does not preempt the client before it sleeps; from the
** first running command to the last they run as SCHED_OTHER, so exits and
** new commands are handled as promptly as before. A command counts for
** the process that forks and reaps it: the provider for a local session,
** the helper for a bubblewrap session (for those the provider only passes
** messages on, and stays SCHED_BATCH). See relay_sched.c for why.
*/
#ifndef SMOL_RELAY_SCHED_H
#define SMOL_RELAY_SCHED_H

#include <stdbool.h>

/* One relay's policy: the provider's lives in its context, the helper's in its own. */
typedef struct relay_sched {
  bool managed;            /* we started as SCHED_OTHER, so we switch */
  bool batch_now;
  unsigned long running;   /* commands started and not yet ended */
} relay_sched;

/* At the start of serving: manage our policy if it is SCHED_OTHER (a policy a user chose is kept). */
void relay_sched_enter(relay_sched *r);

/* A command is about to start (call before spawning it) / has ended or failed to start. */
void relay_sched_busy(relay_sched *r);
void relay_sched_idle(relay_sched *r);

/* In a vfork child: back to SCHED_OTHER if we are SCHED_BATCH now. Async-signal-safe. */
void relay_sched_child(const relay_sched *r);

#endif
