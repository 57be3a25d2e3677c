/*
** The provider's state: one struct per program, so everything the
** provider remembers between two calls is listed here, in one place (as
** luv keeps its loop and callbacks in luv_ctx_t). Each part belongs to
** one module, named beside it; only that module reads or writes it. The
** parts are opaque here and made by their module at first use, so this
** header depends on no module and every module may include it.
**
** The modules below the serving layers (spawn.c, relay_sched.c,
** group_wait.c, bwrap_args.c...) keep no state of their own: they are
** handed what they need, so the sandbox helper (a different program,
** with its own state in sandbox_helper.c) can share them.
*/
#ifndef SMOL_CONTEXT_H
#define SMOL_CONTEXT_H

#include <stdbool.h>
#include <uv.h>

#include "relay_sched.h"
#include "spawn.h"

typedef struct provider {
  uv_loop_t *loop;                 /* the one loop the provider runs */
  struct wire *wire;               /* wire.c: stdin, stdout, the reply queue */
  struct server *server;           /* server.c: signal handlers, the stop sequence */
  struct session_table *sessions;  /* session.c: the open sessions, the next id */
  struct provider_root *root;      /* root.c: the private directory of every session */
  struct openings *openings;       /* opening.c: sessions being opened */
  struct discards *discards;       /* discard.c: closed sessions' directories being removed */
  struct removes *removes;         /* removing.c: `remove` requests in flight */
  struct proc_table *procs;        /* process.c: every process not yet forgotten */
  struct archive_table *archives;  /* archive_op.c: the archives in flight */
  struct reaper *reaper;           /* backend_local.c: the pidfds of local commands */
  struct strays *strays;           /* strays.c: the children a backend reaps itself */
  struct profile_table *profiles;  /* profile.c: built-in and users' profiles */
  struct bwrap_probe *bwrap;       /* bwrap_probe.c: whether bubblewrap works here */
  struct json_arena *requests;     /* envelope.c: cJSON's memory for the request being decoded */
  int openat2;                     /* paths.c: 0 not known yet, 1 usable, -1 walk instead */
  int spare_fds[4];                /* fd_reserve.c: descriptors kept back for clean-up */
  unsigned nspare;                 /* fd_reserve.c: how many of them are open */
  relay_sched sched;               /* relay_sched.h: the provider's own scheduling policy */
  spawn_setup spawn;               /* spawn.h: what every start of a command needs */
} provider;

/* The program's one context (zeroed until serving starts it). */
provider *provider_ctx(void);

/* calloc that gives up on failure: the context's parts are small, and a provider without them cannot serve. */
void *ctx_alloc(size_t size);

/* The context's part `member` (a pointer field above), made zeroed at first use. */
#define CTX_PART(member) \
  (provider_ctx()->member ? provider_ctx()->member \
                          : (provider_ctx()->member = ctx_alloc(sizeof *provider_ctx()->member)))

#endif
