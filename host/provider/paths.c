/*
** Path resolution (see paths.h).
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "paths.h"

#include "context.h"
#include "names.h"
#include "utf8.h"

/* openat2 answers EAGAIN when a rename raced with a ".." walk; retrying is what the kernel asks (but see leased). */
#define OPENAT2_RETRIES 16

/*
** Without openat2 (Linux < 5.6, or a seccomp filter that refuses it): walk
** the normalised path one component at a time and follow no symlink at
** all, not even one that stays inside. Stricter than the kernel's
** RESOLVE_BENEATH, never weaker: ".." cannot occur after path_resolve().
*/
static int open_walking(int dirfd, const char *rel, int flags, mode_t mode) {
  int fd = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat top;
  if (fd >= 0 && fstat(fd, &top) < 0) { close(fd); return -errno; }
  for (const char *p = rel; fd >= 0;) {
    size_t n = strcspn(p, "/");
    char name[NAME_MAX + 1];
    if (n > NAME_MAX) { close(fd); return -ENAMETOOLONG; }
    memcpy(name, p, n);
    name[n] = '\0';
    bool last = p[n] == '\0';
    int next = last ? openat(fd, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)
                    : openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    struct stat st;
    /* A link where a directory is needed is refused as a link, like openat2 would. */
    if (next < 0 && err == ENOTDIR && fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
      err = ELOOP;
    close(fd);
    if (next < 0) return -err;
    /* another filesystem mounted below the area: refused, as RESOLVE_NO_XDEV does */
    if (fstat(next, &st) < 0 || st.st_dev != top.st_dev) { close(next); return -EXDEV; }
    if (last) return next;
    fd = next;
    p += n + 1;
  }
  return -errno;
}

static long openat2_beneath(int dirfd, const char *rel, int flags, mode_t mode) {
  struct open_how how = {
    .flags = (unsigned)(flags | O_CLOEXEC),
    .mode = (flags & O_CREAT) ? mode : 0,
    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
  };
  return syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
}

/*
** EAGAIN has two meanings: a rename raced with a ".." walk (retry), or,
** for an O_NONBLOCK open of the file itself, another process holds a lease
** on it. The lease shows when the same path resolves with O_PATH (which
** opens no file and breaks no lease): then it is not retried, which would
** only wait for the holder in a busy loop.
*/
static bool leased(int dirfd, const char *rel, int flags) {
  if (flags & O_PATH) return false;
  for (int i = 0; i < OPENAT2_RETRIES; i++) {
    long fd = openat2_beneath(dirfd, rel, O_PATH, 0);
    if (fd >= 0) { close((int)fd); return true; }
    if (errno != EAGAIN && errno != EINTR) return false;
  }
  return false;
}

/* The walk is used when the kernel lacks openat2, or with SMOLWF_PROVIDER_NO_OPENAT2=1 (to test it). */
int open_beneath(int dirfd, const char *rel, int flags, mode_t mode) {
  int *openat2 = &provider_ctx()->openat2;
  if (*openat2 == 0) *openat2 = getenv("SMOLWF_PROVIDER_NO_OPENAT2") ? -1 : 1;
  if (*openat2 < 0) return open_walking(dirfd, rel, flags, mode);
  for (int i = 0; i < OPENAT2_RETRIES; i++) {
    long fd = openat2_beneath(dirfd, rel, flags, mode);
    if (fd >= 0) return (int)fd;
    if (errno == ENOSYS) { *openat2 = -1; return open_walking(dirfd, rel, flags, mode); }
    if (errno == EAGAIN && leased(dirfd, rel, flags)) return -EAGAIN;
    if (errno != EAGAIN && errno != EINTR) return -errno;
  }
  return -EAGAIN;
}

void path_join(char *out, const char *dir, const char *name) {
  size_t dl = strlen(dir);
  bool slash = dl > 0 && dir[dl - 1] == '/';
  snprintf(out, PATH_MAX, "%s%s%s", dir, slash ? "" : "/", name);
}

/* Drops the last component of the absolute path in buf (never above "/"). */
static void pop_component(char *buf, size_t *len) {
  while (*len > 1 && buf[*len - 1] != '/') (*len)--;
  if (*len > 1) (*len)--;
  buf[*len] = '\0';
}

/* Why a path cannot be normalised. */
typedef enum { NORMAL, TOO_LONG, NAME_TOO_LONG } normalised;

/* Appends the components of path to the absolute path in buf, by text. */
static normalised normalise_into(char *buf, size_t *len, const char *path) {
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, "/");
    if (n > NAME_MAX) return NAME_TOO_LONG;
    if (n == 2 && p[0] == '.' && p[1] == '.') pop_component(buf, len);
    else if (n > 0 && !(n == 1 && p[0] == '.')) {
      if (*len + 1 + n >= PATH_MAX) return TOO_LONG;
      if (*len > 1) buf[(*len)++] = '/';
      memcpy(buf + *len, p, n);
      *len += n;
      buf[*len] = '\0';
    }
    p += n;
    while (*p == '/') p++;
  }
  return NORMAL;
}

/* The part of view below area ("" for the area itself), or NULL when view is not in it. */
static const char *below(const char *view, const char *area) {
  size_t n = strlen(area);
  while (n > 1 && area[n - 1] == '/') n--;
  if (strncmp(view, area, n) != 0) return NULL;
  if (view[n] == '\0') return view + n;
  return view[n] == '/' ? view + n + 1 : NULL;
}

bool path_resolve(const session *s, const char *what, const char *path, resolved *out, failure *f) {
  if (!path || !*path) return fail(f, "invalid_request", "%s: empty path", what);
  size_t len = 1, plen = strlen(path);
  snprintf(out->given, sizeof out->given, "%.*s", (int)utf8_prefix(path, plen, sizeof out->given - 1), path);
  strcpy(out->view, "/");
  normalised n = path[0] != '/' ? normalise_into(out->view, &len, s->cwd_view) : NORMAL;
  if (n == NORMAL) n = normalise_into(out->view, &len, path);
  if (n == NAME_TOO_LONG)
    return fail(f, "invalid_request", "%s `%s`: a path component is longer than %d bytes", what, out->given, NAME_MAX);
  if (n == TOO_LONG)
    return fail(f, "invalid_request", "%s `%s`: path too long (at most %d bytes)", what, out->given, PATH_MAX - 1);
  const char *rest = below(out->view, s->workspace_view);
  out->area_fd = s->workspace_fd;
  if (!rest) { rest = below(out->view, s->tmp_view); out->area_fd = s->tmp_fd; }
  if (!rest)
    return fail(f, "permission_denied", "%s `%s`: outside the sandbox (only %s and %s are reachable)",
                what, out->given, s->workspace_view, s->tmp_view);
  snprintf(out->rel, sizeof out->rel, "%s", *rest ? rest : ".");
  return true;
}

bool path_param(const session *s, const char *what, const cJSON *params, resolved *out, failure *f) {
  char *path = NULL;
  bool ok = names_param(params, "path", &path, f) && path_resolve(s, what, path, out, f);
  free(path);
  return ok;
}

int path_open(const resolved *p, int flags, mode_t mode) {
  return open_beneath(p->area_fd, p->rel, flags, mode);
}

int path_open_parent(const resolved *p, const char **name) {
  const char *slash = strrchr(p->rel, '/');
  if (strcmp(p->rel, ".") == 0) { *name = NULL; return open_beneath(p->area_fd, ".", O_PATH | O_DIRECTORY, 0); }
  if (!slash) { *name = p->rel; return open_beneath(p->area_fd, ".", O_PATH | O_DIRECTORY, 0); }
  char parent[PATH_MAX];
  memcpy(parent, p->rel, (size_t)(slash - p->rel));
  parent[slash - p->rel] = '\0';
  *name = slash + 1;
  return open_beneath(p->area_fd, parent, O_PATH | O_DIRECTORY, 0);
}
