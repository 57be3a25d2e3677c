/*
** The provider's root directory (see root.h).
*/
#define _GNU_SOURCE
#include "root.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "context.h"
#include "job.h"
#include "keeper.h"
#include "tree.h"

/* The root (the context's part). */
typedef struct provider_root {
  char *path;
  int fd;
  int keeper_fd;           /* the write end of the keeper's pipe (keeper.h), -1 without one */
  char *base;              /* where the root is: the sweep's directory */
  struct job *sweep;       /* removing abandoned roots, NULL once done */
} provider_root;

const char *root_base(void) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  struct stat st;
  if (xdg && *xdg == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && access(xdg, W_OK | X_OK) == 0)
    return xdg;
  return "/tmp";
}

/*
** A provider killed by SIGKILL cannot remove its root. Every root is named
** after its provider's pid and locked (flock) for the provider's whole
** life, so the next provider can tell an abandoned one: its lock can be
** taken. The lock alone would do but for the moment between a root's
** mkdtemp and its flock, so a root whose pid is alive is also left alone
** while it is younger than FRESH_ROOT_SECONDS; older, its pid was reused
** (pid_max is often 32768) and it is swept too. Roots of live providers,
** and roots of other layouts, are never touched.
*/
#define FRESH_ROOT_SECONDS 60

static bool abandoned_root(int base_fd, const char *name, int *fd) {
  long pid;
  int end = 0;
  /* "smolwf-provider.PID.XXXXXX", as root_path() names them */
  if (sscanf(name, "smolwf-provider.%ld.%n", &pid, &end) != 1 || end == 0 || strlen(name + end) != 6 || pid <= 0)
    return false;
  *fd = openat(base_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (*fd < 0 || fstat(*fd, &st) != 0 || st.st_uid != geteuid()) return false;
  bool pid_alive = kill((pid_t)pid, 0) == 0 || errno != ESRCH;
  if (pid_alive && time(NULL) - st.st_mtime < FRESH_ROOT_SECONDS) return false;
  return flock(*fd, LOCK_EX | LOCK_NB) == 0;
}

/*
** On a job (job.h): an abandoned root holds whatever its sessions wrote,
** 100k files as easily as none, and the open that made our root, like
** every other request, is served meanwhile. Never cut short.
*/
static void sweep_work(job *j) {
  const provider_root *r = j->data;
  DIR *d = opendir(r->base);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    int fd = -1;
    if (abandoned_root(dirfd(d), e->d_name, &fd)) tree_remove(dirfd(d), e->d_name);
    if (fd >= 0) close(fd);
  }
  closedir(d);
}

static void swept(job *j) {
  provider_root *r = j->data;
  r->sweep = NULL;
}

/* Sweeps base on a job (here and now when no thread can be had); our own root is locked, so left alone. */
static void start_sweep(provider_root *r, const char *base) {
  r->base = strdup(base);
  r->sweep = job_start(provider_ctx()->loop, sweep_work, swept, r);
  if (!r->sweep) sweep_work(&(job){.data = r});
}

/* Makes and locks a new root under base; false (errno set) when it cannot. */
static bool make_root(provider_root *r, const char *base) {
  char tmpl[PATH_MAX];
  snprintf(tmpl, sizeof tmpl, "%s/smolwf-provider.%ld.XXXXXX", base, (long)getpid());
  if (!mkdtemp(tmpl)) return false;   /* mkdtemp makes it 0700 */
  r->fd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (r->fd < 0 || flock(r->fd, LOCK_EX | LOCK_NB) < 0) {
    int err = errno;
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
    rmdir(tmpl);
    errno = err;
    return false;
  }
  r->path = strdup(tmpl);
  return true;
}

const char *root_path(void) {
  provider *ctx = provider_ctx();
  if (ctx->root) return ctx->root->path;
  provider_root *r = ctx_alloc(sizeof *r);
  const char *base = root_base();
  if (!make_root(r, base)) { free(r); return NULL; }
  r->keeper_fd = keeper_start(r->path);
  if (r->keeper_fd < 0) fprintf(stderr, "smolwf-provider: cannot start the keeper of %s: %s\n", r->path, strerror(errno));
  ctx->root = r;
  start_sweep(r, base);
  return r->path;
}

int root_fd(void) {
  const provider_root *r = provider_ctx()->root;
  return r ? r->fd : -1;
}

void root_remove(void) {
  provider *ctx = provider_ctx();
  provider_root *r = ctx->root;
  if (!r) return;
  if (r->sweep) job_finish_now(r->sweep);   /* nothing else is served any more: its end is waited for here */
  close(r->fd);
  if (r->keeper_fd >= 0) close(r->keeper_fd);   /* the keeper looks once more, finds nothing, exits */
  /* On the loop: it serves nothing more, and every session's files went on jobs already (what is left failed there). */
  int rc = tree_remove(AT_FDCWD, r->path);
  if (rc < 0) fprintf(stderr, "smolwf-provider: removing %s: %s\n", r->path, strerror(-rc));
  free(r->path);
  free(r->base);
  free(r);
  ctx->root = NULL;
}
