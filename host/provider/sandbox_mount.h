/*
** The helper's first steps in a session whose workspace is an overlay
** (see bwrap_args.h for how the sandbox is laid out for it), taken before
** it says HELLO, so before any command exists:
**
**   1. mount the overlay on /workspace: the host tree (staged read-only
**      at SANDBOX_STAGE_LOWER) as its lower layer, the session's
**      directory (staged at SANDBOX_STAGE_SESSION) holding the upper
**      layer and overlay's work directory; if the kernel refuses, bind
**      the upper directory there instead (the provider then copies the
**      tree into it). Then unmount both staging mounts, so commands see
**      neither layer directly;
**   2. leave every privilege behind, for good (sandbox_drop_privileges).
**
** Mounting needs CAP_SYS_ADMIN (and CAP_DAC_OVERRIDE: overlay makes its
** work directory mode 000 and works in it with the mounter's
** credentials) in the user namespace that owns the sandbox's mount
** namespace, and CAP_SETFCAP there to map uid 0 into the namespace below
** (step 2, a root provider). bwrap grants the helper just those for such a session
** (and runs it as uid 0 of that namespace, so bwrap itself adds no
** second namespace the helper's capabilities would not reach).
*/
#ifndef SMOL_SANDBOX_MOUNT_H
#define SMOL_SANDBOX_MOUNT_H

#include <stdbool.h>
#include <sys/types.h>

/*
** Step 1. Returns 0 when the overlay is mounted, -errno when the kernel
** refused it and the upper directory is bound instead (the process dies
** when even that fails). refuse: pass an option the kernel rejects, to
** exercise the fallback.
*/
int sandbox_mount_workspace(bool refuse);

/*
** Step 2: enters a new user namespace in which uid and gid are the ids
** of the namespace above (so commands see the ids they would see without
** this step), allows no user namespace below it, and drops every
** capability (effective, permitted, inheritable, ambient and bounding),
** then checks that none is left. Dies when any step fails: a helper
** that kept a privilege must not start commands.
*/
void sandbox_drop_privileges(uid_t uid, gid_t gid);

#endif
