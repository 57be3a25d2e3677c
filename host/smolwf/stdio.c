/*
** The host's own stdin/stdout, asynchronously, for providers written in
** Lua: core.read_stdin, core.write_stdout, core.stdout_pending.
** Both work on dups of fds 0 and 1, so closing a uv handle never closes
** the real fd. Writes through core.write_stdout are not ordered with
** print()/io.write (those go through C stdio buffers): use one or the other.
*/
#include "host.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#define STDIN_MT "smol.stdin_reader"
#define DEFAULT_MAX_LINE ((size_t)256 * 1024 * 1024)

/* {=================== stdin ===================} */


static void on_stdin_closed(reader *r, void *owner) {
  (void)r;
  (void)owner;
  host_get()->stdin_busy = 0;
}

/* Opens a dup of fd 0 as host_get()->stdin_reader; 0 or a UV_E* code (then nothing is left open). */
static int open_stdin(int lines, size_t max_line) {
  int fd = dup(0);
  if (fd < 0) return uv_translate_sys_error(errno);
  int rc = reader_init_fd(&host_get()->stdin_reader, &host_get()->loop, fd, lines, max_line,
                          NULL, NULL, on_stdin_closed);
  if (rc != 0) close(fd);  /* a failed open leaves the fd ours */
  if (!reader_finished(&host_get()->stdin_reader)) {
    host_get()->stdin_busy = 1;
    if (rc != 0) reader_close(&host_get()->stdin_reader);
  }
  return rc;
}

static size_t check_max_line(lua_State *L) {
  if (lua_getfield(L, 1, "max_line") == LUA_TNIL) return DEFAULT_MAX_LINE;
  int isint;
  lua_Integer n = lua_tointegerx(L, -1, &isint);
  luaL_argcheck(L, isint && n > 0, 1, "max_line must be a positive integer");
  return (size_t)n;
}

/* core.read_stdin{mode = "lines"|"chunks", max_line = N, on_data = fn} -> r | nil, "busy" */
static int core_read_stdin(lua_State *L) {
  static const char *const modes[] = {"lines", "chunks", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "mode");
  int lines = luaL_checkoption(L, -1, "lines", modes) == 0;
  size_t max_line = check_max_line(L);
  luaL_argcheck(L, lua_getfield(L, 1, "on_data") == LUA_TFUNCTION, 1,
                "on_data must be a function");
  if (host_get()->stdin_busy) {
    luaL_pushfail(L);
    lua_pushliteral(L, "busy");
    return 2;
  }
  unsigned *box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = 0;  /* owns nothing until started */
  luaL_setmetatable(L, STDIN_MT);
  int rc = open_stdin(lines, max_line);
  if (rc == 0) rc = reader_start(&host_get()->stdin_reader);
  if (rc != 0) {
    if (host_get()->stdin_busy) reader_close(&host_get()->stdin_reader);
    return luaL_error(L, "read_stdin: %s", uv_strerror(rc));
  }
  lua_pushvalue(L, -2);  /* on_data */
  host_get()->stdin_reader.cb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  *box = ++host_get()->stdin_generation;
  return 1;
}

/* r:stop(): no more callbacks; stops reading and closes our dup of fd 0 */
static int stdin_stop(lua_State *L) {
  unsigned *box = luaL_checkudata(L, 1, STDIN_MT);
  if (*box != 0 && *box == host_get()->stdin_generation && host_get()->stdin_busy) reader_close(&host_get()->stdin_reader);
  *box = 0;
  return 0;
}

static int stdin_tostring(lua_State *L) {
  unsigned *box = luaL_checkudata(L, 1, STDIN_MT);
  int reading = *box != 0 && *box == host_get()->stdin_generation && host_get()->stdin_busy;
  lua_pushstring(L, reading ? "smol.stdin_reader (reading)" : "smol.stdin_reader (stopped)");
  return 1;
}

/* {=================== stdout ===================} */

enum { OUT_UNSET, OUT_STREAM, OUT_FILE, OUT_BROKEN, OUT_CLOSED };


/* A pipe or terminal gets a uv stream on a dup of fd 1; anything else (a file) is written synchronously. */
static int open_stdout(void) {
  uv_handle_type type = uv_guess_handle(1);
  if (type != UV_NAMED_PIPE && type != UV_TTY) return host_get()->out.state = OUT_FILE;
  int fd = dup(1);
  if (fd < 0) return host_get()->out.state = OUT_FILE;
  uv_loop_t *loop = &host_get()->loop;
  int rc = type == UV_TTY ? uv_tty_init(loop, &host_get()->out.h.tty, fd, 0)
                          : uv_pipe_init(loop, &host_get()->out.h.pipe, 0);
  if (rc == 0 && type != UV_TTY && uv_pipe_open(&host_get()->out.h.pipe, fd) != 0) {
    uv_close(&host_get()->out.h.handle, NULL);  /* static memory: nothing to free */
    rc = -1;
  }
  if (rc != 0) {
    close(fd);
    return host_get()->out.state = OUT_FILE;
  }
  return host_get()->out.state = OUT_STREAM;
}

static void on_stdout_written(void *owner, int status) {
  (void)owner;
  if (status < 0 && status != UV_ECANCELED && host_get()->out.state == OUT_STREAM) {
    host_get()->out.state = OUT_BROKEN;
    host_get()->out.error = status;
  }
}

static int write_file_sync(lua_State *L, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(1, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return luaL_error(L, "write_stdout: %s", strerror(errno));
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

/* core.write_stdout(s): async, ordered; raises once stdout is broken (EPIPE) */
static int core_write_stdout(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  if (host_get()->out.state == OUT_UNSET) open_stdout();
  if (host_get()->out.state == OUT_FILE) return write_file_sync(L, s, n);
  if (host_get()->out.state == OUT_BROKEN)
    return luaL_error(L, "write_stdout: %s", uv_strerror(host_get()->out.error));
  if (host_get()->out.state != OUT_STREAM) return luaL_error(L, "write_stdout: stdout is closed");
  int rc = write_anchored(L, &host_get()->out.h.stream, 1, &host_get()->out.pending, NULL, on_stdout_written);
  if (rc != 0) return luaL_error(L, "write_stdout: %s", uv_strerror(rc));
  return 0;
}

static int core_stdout_pending(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)host_get()->out.pending);
  return 1;
}

/* {=================== exit path ===================} */

int stdio_out_pending(void) { return host_get()->out.state == OUT_STREAM ? (int)(host_get()->out.pending > 0) : 0; }

/* No more Lua callbacks from our stdin. */
void stdio_stop_reading(void) {
  if (host_get()->stdin_busy) reader_close(&host_get()->stdin_reader);
}

void stdio_close_all(void) {
  stdio_stop_reading();
  if (host_get()->out.state == OUT_STREAM || host_get()->out.state == OUT_BROKEN) uv_close(&host_get()->out.h.handle, NULL);
  if (host_get()->out.state != OUT_UNSET) host_get()->out.state = OUT_CLOSED;
}

void stdio_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"read_stdin", core_read_stdin}, {"write_stdout", core_write_stdout},
    {"stdout_pending", core_stdout_pending}, {NULL, NULL}};
  static const luaL_Reg methods[] = {{"stop", stdin_stop}, {NULL, NULL}};
  static const luaL_Reg meta[] = {
    {"__gc", stdin_stop}, {"__close", stdin_stop}, {"__tostring", stdin_tostring}, {NULL, NULL}};
  host_class(L, STDIN_MT, methods, meta);
  luaL_setfuncs(L, funcs, 0);
}
