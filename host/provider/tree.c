/*
** Removing whole trees (see tree.h): through directory fds and *at()
** calls with O_NOFOLLOW, so a link in the tree is never followed, whatever
** it points to, and a link swapped in mid-walk fails the open instead of
** leading elsewhere.
*/
#define _GNU_SOURCE
#include "tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deeper trees are left in place below this depth (each level holds one fd). */
#define MAX_DEPTH 1024

/*
** A command may leave a directory without write or search permission; an
** unprivileged provider could then not empty it. Make it 0700 first,
** through an O_PATH fd opened without following links, so a link swapped
** in cannot make us chmod something outside.
*/
static int open_dir_for_removal(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 || errno != EACCES) return fd;
  int pathfd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (pathfd < 0) return -1;
  char proc_path[64];
  snprintf(proc_path, sizeof proc_path, "/proc/self/fd/%d", pathfd);
  chmod(proc_path, 0700);
  close(pathfd);
  return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static int empty_dir(int fd, int depth) {
  DIR *d = fdopendir(fd);
  if (!d) { int err = errno; close(fd); return -err; }
  int rc = 0;
  fchmod(fd, 0700);
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN && unlinkat(fd, e->d_name, 0) == 0) continue;
    int sub = depth < MAX_DEPTH ? open_dir_for_removal(fd, e->d_name) : -1;
    if (sub < 0) { if (unlinkat(fd, e->d_name, 0) < 0 && rc == 0) rc = -errno; continue; }
    int r = empty_dir(sub, depth + 1);
    if (r == 0 && unlinkat(fd, e->d_name, AT_REMOVEDIR) < 0) r = -errno;
    if (r < 0 && rc == 0) rc = r;
  }
  closedir(d);
  return rc;
}

int tree_remove(int dirfd, const char *name) {
  if (unlinkat(dirfd, name, 0) == 0) return 0;
  if (errno != EISDIR && errno != EPERM) return -errno;
  int fd = open_dir_for_removal(dirfd, name);
  if (fd < 0) return -errno;
  int rc = empty_dir(fd, 0);
  if (rc == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0) rc = -errno;
  return rc;
}
