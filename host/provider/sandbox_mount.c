/*
** The helper's workspace mount and its drop to no privilege (see
** sandbox_mount.h).
**
** Why this is safe: until HELLO no command exists, and the provider sends
** no START before it, so the only code that ever holds the two
** capabilities bwrap grants (sandbox_mount.h) is this file's. The overlay keeps the
** mounter's credentials for its own work on the layers (that is how
** overlayfs works), but those capabilities count only in the sandbox's
** user namespace, where the one mapped uid is the provider's own: they
** reach no file the provider could not reach itself, and overlay checks
** every access of a command against the command's own credentials first.
** The staging mounts are gone before any command runs, so no command can
** write the upper layer behind the overlay's back, nor unmount anything
** (it has no capability in any namespace).
*/
#define _GNU_SOURCE
#include "sandbox_mount.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bwrap_args.h"

static void die(const char *what) {
  fprintf(stderr, "smolwf-provider helper: %s: %s\n", what, strerror(errno));
  _exit(1);
}

int sandbox_mount_workspace(bool refuse) {
  char options[512];
  snprintf(options, sizeof options, "lowerdir=%s,upperdir=%s/%s,workdir=%s/%s,userxattr%s",
           SANDBOX_STAGE_LOWER, SANDBOX_STAGE_SESSION, SESSION_UPPER_DIR, SANDBOX_STAGE_SESSION,
           SESSION_WORK_DIR, refuse ? ",smolwf_refused" : "");
  int rc = 0;
  if (mount("overlay", SANDBOX_WORKSPACE, "overlay", MS_NOSUID | MS_NODEV, options) < 0) {
    rc = -errno;
    char upper[256];
    snprintf(upper, sizeof upper, "%s/%s", SANDBOX_STAGE_SESSION, SESSION_UPPER_DIR);
    if (mount(upper, SANDBOX_WORKSPACE, NULL, MS_BIND, NULL) < 0) die("binding the workspace");
  }
  if (umount2(SANDBOX_STAGE_LOWER, MNT_DETACH) < 0) die("unmounting the staged lower layer");
  if (umount2(SANDBOX_STAGE_SESSION, MNT_DETACH) < 0) die("unmounting the staged session directory");
  return rc;
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  size_t len = strlen(text);
  if (fd < 0 || write(fd, text, len) != (ssize_t)len) die(path);
  close(fd);
}

/* A namespace below the sandbox's: ids mapped one to one onto uid 0 / gid 0 above. */
static void enter_user_namespace(uid_t uid, gid_t gid) {
  if (unshare(CLONE_NEWUSER) < 0) die("unshare(CLONE_NEWUSER)");
  char map[64];
  write_file("/proc/self/setgroups", "deny");
  snprintf(map, sizeof map, "%ld 0 1\n", (long)uid);
  write_file("/proc/self/uid_map", map);
  snprintf(map, sizeof map, "%ld 0 1\n", (long)gid);
  write_file("/proc/self/gid_map", map);
  /* The limit counts in this namespace and below: no command can make one. */
  write_file("/proc/sys/user/max_user_namespaces", "0");
}

static void drop_capabilities(void) {
  for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) die("PR_CAPBSET_DROP");
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0) die("PR_CAP_AMBIENT_CLEAR_ALL");
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct none[2] = {{0}};
  if (syscall(SYS_capset, &hdr, none) < 0) die("capset");
}

/* Reads every capability set back: all of them must be empty. */
static void check_no_capabilities(void) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct now[2];
  if (syscall(SYS_capget, &hdr, now) < 0) die("capget");
  for (int i = 0; i < 2; i++)
    if (now[i].effective || now[i].permitted || now[i].inheritable) { errno = EPERM; die("capabilities left"); }
  for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) { errno = EPERM; die("bounding set left"); }
}

void sandbox_drop_privileges(uid_t uid, gid_t gid) {
  enter_user_namespace(uid, gid);
  drop_capabilities();
  check_no_capabilities();
}
