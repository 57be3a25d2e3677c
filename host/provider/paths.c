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

/* openat2 answers EAGAIN when a rename raced with a ".." walk; retrying is what the kernel asks. */
#define OPENAT2_RETRIES 16

/*
** Without openat2 (Linux < 5.6, or a seccomp filter that refuses it): walk
** the normalised path one component at a time and follow no symlink at
** all, not even one that stays inside. Stricter than the kernel's
** RESOLVE_BENEATH, never weaker: ".." cannot occur after path_resolve().
*/
static int open_walking(int dirfd, const char *rel, int flags, mode_t mode) {
  int fd = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
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
    if (last) return next;
    fd = next;
    p += n + 1;
  }
  return -errno;
}

/* The walk is used when the kernel lacks openat2, or with SMOLWF_PROVIDER_NO_OPENAT2=1 (to test it). */
int open_beneath(int dirfd, const char *rel, int flags, mode_t mode) {
  int *openat2 = &provider_ctx()->openat2;
  if (*openat2 == 0) *openat2 = getenv("SMOLWF_PROVIDER_NO_OPENAT2") ? -1 : 1;
  if (*openat2 < 0) return open_walking(dirfd, rel, flags, mode);
  struct open_how how = {
    .flags = (unsigned)(flags | O_CLOEXEC),
    .mode = (flags & O_CREAT) ? mode : 0,
    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
  };
  for (int i = 0; i < OPENAT2_RETRIES; i++) {
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
    if (fd >= 0) return (int)fd;
    if (errno == ENOSYS) { *openat2 = -1; return open_walking(dirfd, rel, flags, mode); }
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

/* Appends the components of path to the absolute path in buf, by text. */
static bool normalise_into(char *buf, size_t *len, const char *path) {
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.') pop_component(buf, len);
    else if (n > 0 && !(n == 1 && p[0] == '.')) {
      if (*len + 1 + n >= PATH_MAX) return false;
      if (*len > 1) buf[(*len)++] = '/';
      memcpy(buf + *len, p, n);
      *len += n;
      buf[*len] = '\0';
    }
    p += n;
    while (*p == '/') p++;
  }
  return true;
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
  size_t len = 1;
  out->given = path;
  strcpy(out->view, "/");
  if ((path[0] != '/' && !normalise_into(out->view, &len, s->cwd_view)) ||
      !normalise_into(out->view, &len, path))
    return fail(f, "invalid_request", "%s `%s`: path too long", what, path);
  const char *rest = below(out->view, s->workspace_view);
  out->area_fd = s->workspace_fd;
  if (!rest) { rest = below(out->view, s->tmp_view); out->area_fd = s->tmp_fd; }
  if (!rest)
    return fail(f, "permission_denied", "%s `%s`: outside the sandbox (only %s and %s are reachable)",
                what, path, s->workspace_view, s->tmp_view);
  snprintf(out->rel, sizeof out->rel, "%s", *rest ? rest : ".");
  return true;
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
