/*
** The file methods (see fileops.h). Every path goes through paths.c, so
** nothing here can reach outside the session's workspace and temp area.
**
** They run synchronously on the loop: each touches one file or directory
** (none waits on another process: file_open.h), and a large file moves in
** ranged chunks chosen by the client, at most one line's worth (MAX_READ,
** the host's line cap) per request, through the page cache (no fsync).
** `list_dir` stats each entry of one directory: its reply, encoded on the
** loop anyway, is as large. `remove`, whose cost is the size of a whole
** tree, runs on a job (removing.h).
*/
#define _GNU_SOURCE
#include "fileops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk_cap.h"
#include "file_open.h"
#include "names.h"
#include "params.h"
#include "paths.h"

/* One read_file answer at most: its base64 must fit the host's line cap (256 MiB). */
#define MAX_READ (128u * 1024 * 1024)

/* Resolves the request's path; on failure answers r and returns false. */
static bool resolve_param(request *r, session *s, const cJSON *params, resolved *p) {
  failure f;
  if (path_param(s, r->method, params, p, &f)) return true;
  reply_failure(r, &f);
  return false;
}

static void reply_errno(request *r, int err, const resolved *p) {
  failure f;
  fail_errno(&f, err, r->method, p->given);
  reply_failure(r, &f);
}

/* ===== create_dir_all ===== */

/* Makes one component in parent_fd (which it closes) and opens it as the next parent. */
static int make_step(int parent_fd, int area_fd, const char *name, const char *prefix) {
  int rc = mkdirat(parent_fd, name, 0777) < 0 && errno != EEXIST ? -errno : 0;
  close(parent_fd);
  if (rc < 0) return rc;
  /* From the area, not the parent: a link inside the area to a directory inside it is fine. */
  return open_beneath(area_fd, prefix, O_PATH | O_DIRECTORY, 0);
}

void method_create_dir_all(request *r, session *s, const cJSON *params) {
  resolved p;
  if (!resolve_param(r, s, params, &p)) return;
  int fd = open_beneath(p.area_fd, ".", O_PATH | O_DIRECTORY, 0);
  char prefix[PATH_MAX];
  for (char *c = p.rel; fd >= 0 && strcmp(p.rel, ".") != 0;) {
    char *slash = strchrnul(c, '/');
    memcpy(prefix, p.rel, (size_t)(slash - p.rel));
    prefix[slash - p.rel] = '\0';
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, "%.*s", (int)(slash - c), c);
    fd = make_step(fd, p.area_fd, name, prefix);
    if (!*slash) break;
    c = slash + 1;
  }
  if (fd < 0) { reply_errno(r, -fd, &p); return; }
  close(fd);
  reply_result(r, cJSON_CreateObject());
}

/* ===== write_file ===== */

static bool write_all(int fd, const char *data, size_t len) {
  for (size_t done = 0; done < len;) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += (size_t)n;
  }
  return true;
}

/* Whether the write's file exists; *bytes: what a truncating write of it replaces (allocated bytes). */
static bool replaced(const resolved *p, bool append, uint64_t *bytes) {
  int fd = path_open(p, O_PATH | O_NOFOLLOW, 0);
  struct stat st;
  bool found = fd >= 0 && fstat(fd, &st) == 0;
  if (fd >= 0) close(fd);
  *bytes = found && !append && S_ISREG(st.st_mode) ? (uint64_t)st.st_blocks * 512 : 0;
  return found;
}

/*
** The session's disk allowance counts the provider's own writes too: a
** write that would take the session past it is refused before it happens
** (commands are stopped by the measures instead, disk_cap.h). True when
** the write may go ahead; false once r is answered, or waits for a new measure.
*/
static bool disk_allows(request *r, session *s, const cJSON *params, const resolved *p, size_t len, bool append,
                        bool *creates) {
  uint64_t bytes = 0;
  *creates = !replaced(p, append, &bytes);
  failure f;
  if (disk_watch_allows_write(s, p->given, len, bytes, *creates, &f)) return true;
  if (!disk_watch_recheck(s, r, params, method_write_file)) reply_failure(r, &f);
  return false;
}

void method_write_file(request *r, session *s, const cJSON *params) {
  resolved p;
  if (!resolve_param(r, s, params, &p)) return;
  failure f;
  char *data = NULL;
  size_t len = 0;
  bool append = false;
  uint64_t mode = UINT64_MAX;
  if (!param_bool(params, "append", &append, &f) || !param_uint(params, "mode", &mode, &f) ||
      !param_base64(params, "content_base64", &data, &len, &f)) { reply_failure(r, &f); return; }
  if (mode != UINT64_MAX && mode > 07777) { free(data); reply_error(r, "invalid_request", "write_file: `mode` %llu is not a permission mode", (unsigned long long)mode); return; }
  bool creates = false;
  if (!disk_allows(r, s, params, &p, len, append, &creates)) { free(data); return; }
  int fd = file_open_write(&p, r->method, append, mode != UINT64_MAX ? (mode_t)mode : 0644, &f);
  int err = fd < 0 ? 0 : (write_all(fd, data, len) ? 0 : errno);
  if (fd >= 0) close(fd);
  free(data);
  if (fd < 0) reply_failure(r, &f);
  else if (err) reply_errno(r, err, &p);
  else reply_result(r, cJSON_CreateObject());
  if (fd >= 0) disk_watch_wrote(s, len, creates);   /* what was written counts, even when not all of it was */
}

/* ===== read_file ===== */

static ssize_t read_range(int fd, char *buf, size_t len, off_t offset) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = pread(fd, buf + done, len - done, offset + (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    done += (size_t)n;
  }
  return (ssize_t)done;
}

/* How many bytes to read: the range asked for, within the file and MAX_READ. */
static bool read_length(request *r, const cJSON *params, const struct stat *st, uint64_t *offset, uint64_t *len) {
  failure f;
  uint64_t length = UINT64_MAX;
  *offset = 0;
  if (!param_uint(params, "offset", offset, &f) || !param_uint(params, "length", &length, &f)) {
    reply_failure(r, &f);
    return false;
  }
  uint64_t size = (uint64_t)st->st_size;
  uint64_t left = *offset < size ? size - *offset : 0;
  *len = length < left ? length : left;
  if (*len <= MAX_READ) return true;
  reply_error(r, "limit_exceeded", "read_file: %llu bytes asked for at once; read at most %u per request with offset/length",
              (unsigned long long)*len, MAX_READ);
  return false;
}

void method_read_file(request *r, session *s, const cJSON *params) {
  resolved p;
  if (!resolve_param(r, s, params, &p)) return;
  struct stat st;
  failure f;
  int fd = file_open_read(&p, r->method, &st, &f);
  if (fd < 0) { reply_failure(r, &f); return; }
  uint64_t offset, len;
  if (!read_length(r, params, &st, &offset, &len)) { close(fd); return; }
  char *buf = malloc(len ? len : 1);
  ssize_t n = read_range(fd, buf, len, (off_t)offset);
  int err = errno;
  close(fd);
  if (n < 0) { free(buf); reply_errno(r, err, &p); return; }
  cJSON *result = cJSON_CreateObject();
  cJSON_AddBoolToObject(result, "eof", offset + (uint64_t)n >= (uint64_t)st.st_size);
  blob content = {"content_base64", buf, (size_t)n};
  reply_result_blobs(r, result, &content, 1);
  free(buf);
}

/* ===== create_temp_dir ===== */

static bool valid_prefix(const char *prefix) {
  return !strchr(prefix, '/') && strlen(prefix) < 200 && strcmp(prefix, ".") != 0 && strcmp(prefix, "..") != 0;
}

/* mkdtemp in the session's temp area: PREFIX + 8 random characters. */
static int make_temp_dir(int dirfd, const char *prefix, char *name, size_t namelen) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  for (int attempt = 0; attempt < 100; attempt++) {
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd) return -errno;
    size_t n = (size_t)snprintf(name, namelen, "%s", prefix);
    for (size_t i = 0; i < sizeof rnd && n + 1 < namelen; i++) name[n++] = alphabet[rnd[i] % 36];
    name[n] = '\0';
    if (mkdirat(dirfd, name, 0700) == 0) return 0;
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

void method_create_temp_dir(request *r, session *s, const cJSON *params) {
  const char *prefix = "tmp";
  failure f;
  if (!param_string(params, "prefix", true, &prefix, &f)) { reply_failure(r, &f); return; }
  if (!valid_prefix(prefix)) { reply_error(r, "invalid_request", "create_temp_dir: prefix `%s` must be a plain name", prefix); return; }
  int dirfd = open_beneath(s->tmp_fd, ".", O_RDONLY | O_DIRECTORY, 0);
  char name[256];
  int rc = dirfd < 0 ? dirfd : make_temp_dir(dirfd, prefix, name, sizeof name);
  if (dirfd >= 0) close(dirfd);
  if (rc < 0) { fail_errno(&f, -rc, "create_temp_dir in", s->tmp_view); reply_failure(r, &f); return; }
  char path[PATH_MAX];
  path_join(path, s->tmp_view, name);
  cJSON *result = cJSON_CreateObject();
  cJSON_AddStringToObject(result, "path", path);
  reply_result(r, result);
}

/* ===== stat and list_dir ===== */

static const char *type_name(mode_t mode) {
  if (S_ISREG(mode)) return "file";
  if (S_ISDIR(mode)) return "dir";
  if (S_ISLNK(mode)) return "symlink";
  return "other";
}

void method_stat(request *r, session *s, const cJSON *params) {
  resolved p;
  if (!resolve_param(r, s, params, &p)) return;
  const char *name;
  int dirfd = path_open_parent(&p, &name);
  struct stat st;
  int err = dirfd < 0 ? -dirfd
          : fstatat(dirfd, name ? name : "", &st, AT_SYMLINK_NOFOLLOW | (name ? 0 : AT_EMPTY_PATH)) < 0 ? errno : 0;
  if (dirfd >= 0) close(dirfd);
  if (err) { reply_errno(r, err, &p); return; }
  cJSON *result = cJSON_CreateObject();
  cJSON_AddStringToObject(result, "type", type_name(st.st_mode));
  cJSON_AddNumberToObject(result, "size", (double)st.st_size);
  cJSON_AddNumberToObject(result, "mode", st.st_mode & 07777);
  cJSON_AddNumberToObject(result, "mtime", (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9);
  reply_result(r, result);
}

/* An entry of a listing: its exact name (for sorting) and its object. */
typedef struct listed {
  char *name;
  cJSON *obj;
} listed;

static int by_name(const void *a, const void *b) {
  return strcmp(((const listed *)a)->name, ((const listed *)b)->name);
}

static cJSON *dir_entry(int dirfd, const char *name) {
  struct stat st;
  cJSON *e = cJSON_CreateObject();
  names_add(e, "name", name);
  bool ok = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
  cJSON_AddStringToObject(e, "type", ok ? type_name(st.st_mode) : "other");
  cJSON_AddNumberToObject(e, "size", ok ? (double)st.st_size : 0);
  return e;
}

/* The entries of the open directory fd (closed here), sorted by their names' bytes. */
static cJSON *list_entries(int fd) {
  DIR *d = fdopendir(fd);
  if (!d) { close(fd); return NULL; }
  size_t n = 0, cap = 16;
  listed *items = malloc(cap * sizeof *items);
  if (!items) abort();
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (n == cap && !(items = realloc(items, (cap *= 2) * sizeof *items))) abort();
    items[n++] = (listed){strdup(e->d_name), dir_entry(dirfd(d), e->d_name)};
  }
  closedir(d);
  qsort(items, n, sizeof *items, by_name);
  cJSON *array = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) { cJSON_AddItemToArray(array, items[i].obj); free(items[i].name); }
  free(items);
  return array;
}

void method_list_dir(request *r, session *s, const cJSON *params) {
  resolved p;
  if (!resolve_param(r, s, params, &p)) return;
  int fd = path_open(&p, O_RDONLY | O_DIRECTORY, 0);
  cJSON *entries = fd < 0 ? NULL : list_entries(fd);
  if (!entries) { reply_errno(r, fd < 0 ? -fd : errno, &p); return; }
  cJSON *result = cJSON_CreateObject();
  cJSON_AddItemToObject(result, "entries", entries);
  reply_result(r, result);
}
