/*
** What a bubblewrap session looks like from inside (see README.md, "The bundled provider's profiles"):
**
**   namespaces   user, pid, ipc, uts, cgroup (if possible), mount, and
**                network unless the profile has the network
**   /usr, /etc   the host's, read-only; /bin, /lib... as on the host
**                (symlinks into /usr on merged-/usr systems, else
**                read-only binds); what others may not read in /etc
**                is masked (add_masks)
**   /proc /dev   fresh ones for the pid namespace; a minimal /dev
**   /tmp         the session's tmp directory, writable
**   /workspace   the session's workspace, writable; the cwd
**   the profile's extra binds, then the helper, read-only
**
** Hardening: --cap-drop ALL (bwrap run by root would otherwise keep every
** capability inside, enough to remount the read-only binds writable),
** --disable-userns (no nested user namespace to regain capabilities in),
** --die-with-parent, --new-session (no TIOCSTI into the provider's tty),
** --as-pid-1 (the helper is the namespace's init, see sandbox_helper.c).
*/
#define _GNU_SOURCE
#include "bwrap_args.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Top-level system directories, bound read-only (or recreated as the host's symlinks). */
static const char *const system_dirs[] = {
  "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", NULL
};

/*
** What others may not read in /etc is replaced by something empty: a
** provider run as root runs commands as root of the user namespace
** (without capabilities, but still the owner of root's files), and a
** list of known secrets always misses one (a CA store's password, a
** tool's configuration). So the rule is the file's own mode: a file (or
** FIFO, socket, device) without the read bit for others becomes
** /dev/null, and a directory that others may not list or enter becomes an
** empty tmpfs. Symbolic links are left alone: what they point to inside
** /etc is masked by the same rule, and nothing outside it is bound.
*/
#define MASKED_ROOT "/etc"
/* /etc is shallow; deeper levels (each holds a descriptor) are not looked into. */
#define MASK_MAX_DEPTH 32

static void push3(argvec *s, const char *a, const char *b, const char *c);

static void mask_dir(argvec *a, int dirfd, const char *path, int depth);

static void mask_entry(argvec *a, int dirfd, const char *name, const char *path, int depth) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISLNK(st.st_mode)) return;
  if (S_ISDIR(st.st_mode)) {
    if ((st.st_mode & (S_IROTH | S_IXOTH)) != (S_IROTH | S_IXOTH)) { push3(a, "--tmpfs", path, NULL); return; }
    int fd = depth < MASK_MAX_DEPTH ? openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd >= 0) mask_dir(a, fd, path, depth + 1);   /* closes fd */
    return;
  }
  if (!(st.st_mode & S_IROTH)) push3(a, "--ro-bind", "/dev/null", path);
}

/* Masks what lies below the directory open at fd (closed here), whose path is path. */
static void mask_dir(argvec *a, int fd, const char *path, int depth) {
  DIR *d = fdopendir(fd);
  if (!d) { close(fd); return; }
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char child[PATH_MAX];
    if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) >= (int)sizeof child) continue;
    mask_entry(a, dirfd(d), e->d_name, child, depth);
  }
  closedir(d);
}

void argvec_push(argvec *s, const char *item) {
  if (s->len + 2 > s->cap) {
    size_t ncap = s->cap ? s->cap * 2 : 64;
    char **grown = realloc(s->v, ncap * sizeof *grown);
    if (!grown) abort();   /* a few hundred bytes: nothing sensible to do without them */
    s->v = grown;
    s->cap = ncap;
  }
  s->v[s->len] = strdup(item);
  if (!s->v[s->len]) abort();
  s->v[++s->len] = NULL;
}

static void push3(argvec *s, const char *a, const char *b, const char *c) {
  argvec_push(s, a);
  argvec_push(s, b);
  if (c) argvec_push(s, c);
}

void argvec_clear(argvec *s) {
  for (size_t i = 0; i < s->len; i++) free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

static void add_namespaces(argvec *a, const profile *p) {
  push3(a, "--unshare-user", "--unshare-pid", "--unshare-ipc");
  push3(a, "--unshare-uts", "--unshare-cgroup-try", NULL);
  if (!p->network) argvec_push(a, "--unshare-net");
  push3(a, "--disable-userns", "--cap-drop", "ALL");
  push3(a, "--die-with-parent", "--new-session", "--as-pid-1");
  push3(a, "--hostname", "sandbox", NULL);
}

static void add_system_dir(argvec *a, const char *dir) {
  struct stat st;
  char target[4096];
  if (lstat(dir, &st) < 0) return;
  if (S_ISLNK(st.st_mode)) {
    ssize_t n = readlink(dir, target, sizeof target - 1);
    if (n <= 0) return;
    target[n] = '\0';
    push3(a, "--symlink", target, dir);
  } else if (S_ISDIR(st.st_mode)) {
    push3(a, "--ro-bind", dir, dir);
  }
}

static void add_masks(argvec *a) {
  int fd = open(MASKED_ROOT, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) mask_dir(a, fd, MASKED_ROOT, 0);
}

static void add_area(argvec *a, const char *host, const char *sandbox) {
  if (host) push3(a, "--bind", host, sandbox);
  else push3(a, "--tmpfs", sandbox, NULL);
}

static void add_profile_binds(argvec *a, const profile *p) {
  for (size_t i = 0; i < p->nbinds; i++)
    push3(a, p->binds[i].writable ? "--bind" : "--ro-bind", p->binds[i].host_path,
          p->binds[i].sandbox_path);
}

void bwrap_args_build(argvec *a, const char *bwrap, const bwrap_layout *l) {
  argvec_push(a, bwrap);
  add_namespaces(a, l->profile);
  for (int i = 0; system_dirs[i]; i++) add_system_dir(a, system_dirs[i]);
  add_masks(a);
  push3(a, "--proc", "/proc", NULL);
  push3(a, "--dev", "/dev", NULL);
  add_area(a, l->tmp_host, SANDBOX_TMP);
  add_area(a, l->workspace_host, SANDBOX_WORKSPACE);
  add_profile_binds(a, l->profile);
  if (l->helper_exe) push3(a, "--ro-bind", l->helper_exe, SANDBOX_HELPER);
  push3(a, "--chdir", SANDBOX_WORKSPACE, "--");
  for (char *const *c = l->command; *c; c++) argvec_push(a, *c);
}
