/*
** SHA-256 for the step cache (sha256.h):
**
**   core.sha256(s, ...)            -> hex digest of the strings, in order
**   core.sha256_file(path)         -> hex digest, or nil, message
**   core.hash_files(paths, cb)     hashes the files on libuv's thread pool,
**                                  then cb(digests) on the loop: digests[i]
**                                  is the hex digest of paths[i] or, when
**                                  it could not be read, false and
**                                  digests.errors[i] says why
**
** Files are read in blocks straight into the digest: never through a Lua
** string, and never on the loop's thread when hashed with hash_files (a
** big input must not stall the other steps' output). Each function raises
** an error when libcrypto cannot be loaded.
*/
#include "host.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "sha256.h"

#define READ_BLOCK (256 * 1024)

/* Raises unless libcrypto is loaded (on the loop's thread, before any job needs it). */
static void check_available(lua_State *L, const char *fn) {
  const char *why = sha256_unavailable();
  if (why != NULL) luaL_error(L, "%s: %s", fn, why);
}

/* Feeds fd to d to its end; 0, or an errno value. */
static int digest_fd(sha256 *d, int fd, unsigned char *buf) {
  for (;;) {
    ssize_t n = read(fd, buf, READ_BLOCK);
    if (n == 0) return 0;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (!sha256_update(d, buf, (size_t)n)) return EIO;
  }
}

/*
** Hashes the file at path into hex (SHA256_HEX_LEN + 1 bytes); returns 0, or an
** errno value (EIO when OpenSSL fails). buf is a READ_BLOCK scratch area.
*/
static int hash_path(const char *path, char *hex, unsigned char *buf) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  sha256 *d = sha256_new();
  int err = d == NULL ? EIO : digest_fd(d, fd, buf);
  if (err == 0 && !sha256_final(d, hex)) err = EIO;
  sha256_free(d);
  close(fd);
  return err;
}

/* core.sha256(s, ...): the digest of the strings' concatenation. */
static int core_sha256(lua_State *L) {
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) luaL_checklstring(L, i, NULL);   /* numbers become strings, as in Lua */
  check_available(L, "sha256");
  sha256 *d = sha256_new();
  if (d == NULL) return luaL_error(L, "sha256: OpenSSL could not start a digest");
  bool ok = true;
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = lua_tolstring(L, i, &len);
    ok = ok && sha256_update(d, s, len);
  }
  char hex[SHA256_HEX_LEN + 1];
  ok = ok && sha256_final(d, hex);
  sha256_free(d);
  if (!ok) return luaL_error(L, "sha256: OpenSSL failed to digest");
  lua_pushstring(L, hex);
  return 1;
}

/* core.sha256_file(path) -> hex, or nil and "path: reason". */
static int core_sha256_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  check_available(L, "sha256_file");
  unsigned char *buf = lua_newuserdatauv(L, READ_BLOCK, 0);  /* freed by the GC, even on error */
  char hex[SHA256_HEX_LEN + 1];
  int err = hash_path(path, hex, buf);
  if (err != 0) {
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: %s", path, strerror(err));
    return 2;
  }
  lua_pushstring(L, hex);
  return 1;
}

/* ===== hash_files: on the thread pool ==================================== */

typedef struct hash_job {
  uv_work_t req;
  int n, cb_ref;
  char **paths;                 /* n strings, malloc'ed */
  char (*hex)[SHA256_HEX_LEN + 1];     /* n digests */
  int *err;                     /* n errno values (0: hashed) */
} hash_job;

static void job_free(hash_job *job) {
  for (int i = 0; i < job->n; i++) free(job->paths[i]);
  free(job->paths);
  free(job->hex);
  free(job->err);
  free(job);
}

static void job_work(uv_work_t *req) {
  hash_job *job = req->data;
  unsigned char *buf = malloc(READ_BLOCK);
  for (int i = 0; i < job->n; i++) job->err[i] = buf == NULL ? ENOMEM : hash_path(job->paths[i], job->hex[i], buf);
  free(buf);
}

/* stack: +1, the digests table (see the header) */
static void push_digests(lua_State *L, hash_job *job) {
  lua_createtable(L, job->n, 1);
  lua_newtable(L);  /* errors */
  for (int i = 0; i < job->n; i++) {
    if (job->err[i] == 0) {
      lua_pushstring(L, job->hex[i]);
    } else {
      lua_pushfstring(L, "%s: %s", job->paths[i], strerror(job->err[i]));
      lua_rawseti(L, -2, i + 1);
      lua_pushboolean(L, 0);
    }
    lua_rawseti(L, -3, i + 1);
  }
  lua_setfield(L, -2, "errors");
}

static void job_done(uv_work_t *req, int status) {
  hash_job *job = req->data;
  lua_State *L = host_get()->L;
  int ref = job->cb_ref;
  job->cb_ref = LUA_NOREF;
  if (status == 0 && lua_checkstack(L, 4)) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    push_digests(L, job);
    host_pcall(1);
  }
  host_unref(&ref);
  job_free(job);
}

/* Copies the list of paths at idx into a new job (NULL: out of memory). */
static hash_job *job_new(lua_State *L, int idx) {
  int n = (int)luaL_len(L, idx);
  hash_job *job = calloc(1, sizeof *job);
  if (job == NULL) return NULL;
  job->cb_ref = LUA_NOREF;
  job->paths = calloc((size_t)n + 1, sizeof *job->paths);
  job->hex = calloc((size_t)n + 1, sizeof *job->hex);
  job->err = calloc((size_t)n + 1, sizeof *job->err);
  if (job->paths == NULL || job->hex == NULL || job->err == NULL) {
    job_free(job);
    return NULL;
  }
  for (; job->n < n; job->n++) {
    lua_rawgeti(L, idx, job->n + 1);
    const char *path = lua_tostring(L, -1);
    char *copy = path != NULL ? strdup(path) : NULL;
    lua_pop(L, 1);
    if (copy == NULL) {
      job_free(job);
      return NULL;
    }
    job->paths[job->n] = copy;
  }
  return job;
}

static void check_paths(lua_State *L, int idx) {
  luaL_checktype(L, idx, LUA_TTABLE);
  int n = (int)luaL_len(L, idx);
  for (int i = 1; i <= n; i++) {
    if (lua_rawgeti(L, idx, i) != LUA_TSTRING)
      luaL_error(L, "bad argument #1 to 'hash_files' (paths[%d] must be a string)", i);
    lua_pop(L, 1);
  }
}

/* core.hash_files(paths, cb): see the header. */
static int core_hash_files(lua_State *L) {
  check_paths(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  check_available(L, "hash_files");
  hash_job *job = job_new(L, 1);
  if (job == NULL) return luaL_error(L, "hash_files: out of memory");
  job->req.data = job;
  lua_pushvalue(L, 2);
  job->cb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  int rc = uv_queue_work(&host_get()->loop, &job->req, job_work, job_done);
  if (rc != 0) {
    host_unref(&job->cb_ref);
    job_free(job);
    return luaL_error(L, "hash_files: %s", uv_strerror(rc));
  }
  return 0;
}

void hash_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"sha256", core_sha256}, {"sha256_file", core_sha256_file},
    {"hash_files", core_hash_files}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
