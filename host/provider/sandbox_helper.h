/*
** The helper that runs inside each bubblewrap session, and the channel
** between it and the provider (backend_bwrap.c).
**
** One long-lived `bwrap ... --as-pid-1 smolwf-provider helper` per session:
** the helper is pid 1 of the session's pid namespace and starts every
** command of the session with spawn_start(), so commands share the
** session's namespaces without paying for a new sandbox each time.
**
** The channel is two SOCK_SEQPACKET socket pairs (message boundaries and
** SCM_RIGHTS for free), inherited by bwrap as the helper's fd 0 and fd 1:
**
**   fd 0, "control" (one way: the provider never waits on the helper):
**     provider -> helper  START  + the command's stdio fds (SCM_RIGHTS)
**     provider -> helper  SIGNAL {tag, signo}
**     end of file                      the helper exits: the kernel then
**                                      kills every process of the namespace
**   fd 1, "events" (asynchronous, watched by the provider's loop):
**     helper -> provider  HELLO + a pidfd of the helper and the workspace as
**                         mounted inside (O_PATH), once at startup
**     helper -> provider  EXITED {tag, wait status}
**     helper -> provider  FAILED {tag, -errno}: a START it could not run
**
** A START is not answered: the provider counts the command as running
** from the moment it sent it, and learns its end from EXITED (or FAILED).
**
** Signals go through the helper: it signals the command's process group
** inside the namespace, and keeps the group of a command it reaped while
** members of that group still run (a timeout must still reach the
** grandchildren holding an exec's pipes). Before, the helper passed a
** pidfd, the provider read the command's host pid from /proc/self/fdinfo
** and acknowledged, and the helper waited for that ACK before reaping
** anything: one more round trip and ~9 system calls per command.
**
** Both ends are the same binary, so messages are plain structs.
*/
#ifndef SMOL_SANDBOX_HELPER_H
#define SMOL_SANDBOX_HELPER_H

#include <stdint.h>
#include "spawn.h"

enum helper_msg_type {
  HELPER_START = 1,
  HELPER_FAILED,
  HELPER_SIGNAL,
  HELPER_HELLO,
  HELPER_EXITED,
};

/* Which stdio fds travel with a START (a missing one means /dev/null, as in spawn_spec). */
enum { HELPER_HAS_STDIN = 1, HELPER_HAS_STDOUT = 2, HELPER_HAS_STDERR = 4 };

/*
** START is this header followed by argc + envc strings, then the cwd if
** has_cwd, each NUL-terminated, filling the rest of the message exactly.
*/
typedef struct helper_start {
  uint32_t type;
  uint32_t fd_mask;        /* HELPER_HAS_*: the attached fds, in this order */
  uint64_t tag;            /* chosen by the provider, never reused in a session */
  limits limits;
  uint32_t has_limits;
  uint32_t argc, envc;
  uint32_t has_cwd;
} helper_start;

/* SIGNAL, HELLO, EXITED and FAILED. */
typedef struct helper_reply {
  uint32_t type;
  int32_t value;           /* SIGNAL: signo; EXITED: the wait status; FAILED: -errno */
  uint64_t tag;
} helper_reply;

/* The largest START the channel carries (argv + environment + cwd). */
#define HELPER_MAX_MESSAGE (128 * 1024)

/* The fds the helper finds the channel on. */
#define HELPER_CONTROL_FD 0
#define HELPER_EVENTS_FD 1

/*
** Identifies the build: HELLO carries it, and the provider refuses a helper
** of another build (its executable replaced on disk since it started, so
** the structs above may differ).
*/
uint64_t helper_build_id(void);

/* Sends msg on a channel socket with up to three fds attached (flags: MSG_DONTWAIT or 0). 0 or -errno. */
int helper_send(int sock, const void *msg, size_t len, const int *fds, int nfds, int flags);

/* `smolwf-provider helper`: the helper's main. Returns only on a usage error. */
int sandbox_helper_main(int argc, char **argv);

#endif
