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
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <sys/auxv.h>
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

/*
** A helper that mounts the workspace (sandbox_mount.h) gets the
** capabilities that takes, runs as uid 0 of the namespace (else bwrap
** would add a second namespace, where they would not count), and keeps
** nested user namespaces off itself, as --disable-userns would.
*/
static void add_privileges(argvec *a, bool mounts) {
  if (!mounts) { push3(a, "--disable-userns", "--cap-drop", "ALL"); return; }
  push3(a, "--cap-drop", "ALL", NULL);
  push3(a, "--cap-add", "CAP_SYS_ADMIN", NULL);
  push3(a, "--cap-add", "CAP_DAC_OVERRIDE", NULL);
  /* The kernel wants it of whoever maps uid 0 into a new namespace: the helper does, for root. */
  push3(a, "--cap-add", "CAP_SETFCAP", NULL);
  push3(a, "--uid", "0", NULL);
  push3(a, "--gid", "0", NULL);
}

static void add_namespaces(argvec *a, const profile *p, bool mounts) {
  push3(a, "--unshare-user", "--unshare-pid", "--unshare-ipc");
  push3(a, "--unshare-uts", "--unshare-cgroup-try", NULL);
  if (!p->network) argvec_push(a, "--unshare-net");
  add_privileges(a, mounts);
  push3(a, "--die-with-parent", "--new-session", "--as-pid-1");
  push3(a, "--hostname", "sandbox", NULL);
}

/* root/dir at dir, read-only: a link is made again as the same link, a directory (or file) bound. */
static void add_system_dir(argvec *a, const char *root, const char *dir) {
  struct stat st;
  char host[4096], target[4096];
  snprintf(host, sizeof host, "%s%s", root, dir);
  if (lstat(host, &st) < 0) return;
  if (S_ISLNK(st.st_mode)) {
    ssize_t n = readlink(host, target, sizeof target - 1);
    if (n <= 0) return;
    target[n] = '\0';
    push3(a, "--symlink", target, dir);
  } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
    push3(a, "--ro-bind", host, dir);
  }
}

/* What a root file system's top holds that the sandbox makes itself. */
static bool made_by_sandbox(const char *name) {
  static const char *const own[] = {".", "..", "proc", "dev", "tmp", "sys", "run", "workspace", NULL};
  for (int i = 0; own[i]; i++) if (strcmp(name, own[i]) == 0) return true;
  return false;
}

/* A profile's own root: every top-level entry of it, in place of the host's system directories. */
static void add_root(argvec *a, const char *root) {
  DIR *d = opendir(root);
  if (!d) return;   /* checked at open (backend_bwrap.c): gone since, the sandbox fails to start */
  for (struct dirent *e; (e = readdir(d));) {
    if (made_by_sandbox(e->d_name)) continue;
    char dir[NAME_MAX + 2];
    snprintf(dir, sizeof dir, "/%s", e->d_name);
    add_system_dir(a, root, dir);
  }
  closedir(d);
}

static void add_masks(argvec *a);

static void add_system(argvec *a, const profile *p) {
  if (p->root) { add_root(a, p->root); return; }
  for (int i = 0; system_dirs[i]; i++) add_system_dir(a, "", system_dirs[i]);
  add_masks(a);
}

static void add_masks(argvec *a) {
  int fd = open(MASKED_ROOT, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) mask_dir(a, fd, MASKED_ROOT, 0);
}

static void add_area(argvec *a, const char *host, const char *sandbox) {
  if (host) push3(a, "--bind", host, sandbox);
  else push3(a, "--tmpfs", sandbox, NULL);
}

/* The workspace: a bound directory, or the staged layers of an overlay the helper mounts. */
static void add_workspace(argvec *a, const bwrap_layout *l) {
  if (!l->overlay_lower) {
    if (l->workspace_ro) push3(a, "--ro-bind", l->workspace_host, SANDBOX_WORKSPACE);
    else add_area(a, l->workspace_host, SANDBOX_WORKSPACE);
    return;
  }
  push3(a, "--dir", SANDBOX_WORKSPACE, NULL);
  push3(a, "--ro-bind", l->overlay_lower, SANDBOX_STAGE_LOWER);
  push3(a, "--bind", l->session_host, SANDBOX_STAGE_SESSION);
}

/* Each shared object the provider runs with, to run the helper under another root. */
static int add_library(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char *path = info->dlpi_name, *base = strrchr(path, '/');
  if (!base || access(path, R_OK) != 0) return 0;   /* the program itself, the vDSO */
  char inside[4096];
  snprintf(inside, sizeof inside, "%s%s", SANDBOX_HELPER_LIBS, base);
  push3(data, "--ro-bind", path, inside);
  return 0;
}

static void add_helper(argvec *a, const bwrap_layout *l) {
  if (!l->helper_exe) return;
  push3(a, "--ro-bind", l->helper_exe, SANDBOX_HELPER);
  if (l->profile->root) dl_iterate_phdr(add_library, a);
}

/* The dynamic loader's name, which runs the helper from SANDBOX_HELPER_LIBS (add_library). */
static int find_loader(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  if (info->dlpi_addr != getauxval(AT_BASE) || !strrchr(info->dlpi_name, '/')) return 0;
  snprintf(data, 256, "%s%s", SANDBOX_HELPER_LIBS, strrchr(info->dlpi_name, '/'));
  return 1;
}

const char *bwrap_helper_loader(void) {
  static char loader[256];
  if (!loader[0]) dl_iterate_phdr(find_loader, loader);
  return loader;
}

static void add_profile_binds(argvec *a, const profile *p) {
  for (size_t i = 0; i < p->nbinds; i++)
    push3(a, p->binds[i].writable ? "--bind" : "--ro-bind", p->binds[i].host_path,
          p->binds[i].sandbox_path);
}

void bwrap_args_build(argvec *a, const char *bwrap, const bwrap_layout *l) {
  argvec_push(a, bwrap);
  add_namespaces(a, l->profile, l->overlay_lower != NULL);
  add_system(a, l->profile);
  push3(a, "--proc", "/proc", NULL);
  push3(a, "--dev", "/dev", NULL);
  add_area(a, l->tmp_host, SANDBOX_TMP);
  add_workspace(a, l);
  add_profile_binds(a, l->profile);
  add_helper(a, l);
  push3(a, "--chdir", SANDBOX_WORKSPACE, "--");
  for (char *const *c = l->command; *c; c++) argvec_push(a, *c);
}
