/*
** Operating-system calls Lua has no library function for, so that no Lua
** module has to start a shell for them:
**
**   core.chmod(path, mode)     -> true | nil, "PATH: message", "EPERM"
**   core.kill(pid, sig)        -> true | nil, "kill PID: message", "ESRCH"
**   core.getpid()              -> this process's id
**   core.raise(sig)            ends this process by sig (its default action)
**   core.error_code(e)         -> the protocol code of an errno name or
**                                 number ("ENOENT" or 2 -> "not_found";
**                                 "io_error" for the rest and for nil)
**
** Failures come back as values, as io.open's do (luaL_fileresult style);
** only a bad argument raises. sig is a name ("TERM", "SIGTERM") or a
** number (host/common/signames.c).
*/
#include "host.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>

#include "errcodes.h"

/* nil, "WHAT: strerror", "EXXX": a failed system call as values. */
static int push_errno(lua_State *L, int e, const char *what) {
  luaL_pushfail(L);
  lua_pushfstring(L, "%s: %s", what, strerror(e));
  lua_pushstring(L, uv_err_name(uv_translate_sys_error(e)));
  return 3;
}

int host_check_signal(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    lua_Integer n = luaL_checkinteger(L, idx);
    luaL_argcheck(L, n >= 0 && n < NSIG, idx, "signal number out of range");  /* 0: only a check */
    return (int)n;
  }
  const char *name = luaL_checkstring(L, idx);
  int signo = signal_from_name(name);
  if (signo == 0) return luaL_argerror(L, idx, lua_pushfstring(L, "unknown signal '%s'", name));
  return signo;
}

static int core_chmod(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer mode = luaL_checkinteger(L, 2);
  luaL_argcheck(L, mode >= 0 && mode <= 07777, 2, "mode must be between 0 and 0o7777");
  if (chmod(path, (mode_t)mode) != 0) return push_errno(L, errno, path);
  lua_pushboolean(L, 1);
  return 1;
}

static int core_kill(lua_State *L) {
  lua_Integer pid = luaL_checkinteger(L, 1);
  int signo = host_check_signal(L, 2);
  if (kill((pid_t)pid, signo) != 0) {
    int e = errno;
    lua_pushfstring(L, "kill %d", (int)pid);
    return push_errno(L, e, lua_tostring(L, -1));
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int core_getpid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

/*
** The host handles INT, TERM and HUP itself (sigint.c), so a plain kill of
** our own pid would only interrupt the script: the default action comes
** back first, and the signal is unblocked in case it was blocked.
*/
static int core_raise(lua_State *L) {
  int signo = host_check_signal(L, 1);
  fflush(NULL);
  signal(signo, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signo);
  sigprocmask(SIG_UNBLOCK, &set, NULL);
  raise(signo);
  return luaL_error(L, "core.raise: signal %d did not end the process", signo);
}

static int core_error_code(lua_State *L) {
  if (lua_type(L, 1) == LUA_TNUMBER) lua_pushstring(L, errno_code((int)luaL_checkinteger(L, 1)));
  else if (lua_isnoneornil(L, 1)) lua_pushliteral(L, "io_error");
  else lua_pushstring(L, errno_name_code(luaL_checkstring(L, 1)));
  return 1;
}

/* core.hostname(): this machine's name (junit.xml's testsuite says where it ran). */
static int core_hostname(lua_State *L) {
  char name[UV_MAXHOSTNAMESIZE];
  size_t size = sizeof name;
  int rc = uv_os_gethostname(name, &size);
  if (rc != 0) return luaL_error(L, "core.hostname: %s", uv_strerror(rc));
  lua_pushlstring(L, name, size);
  return 1;
}

void os_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"chmod", core_chmod}, {"kill", core_kill}, {"getpid", core_getpid},
    {"raise", core_raise}, {"error_code", core_error_code}, {"hostname", core_hostname}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
