/*
** Fuzzing the host's reply path (host/smolwf/conn.c, b64.c): each input is
** reply lines (split at '\n') fed to a provider connection through
** conn_feed_line, exactly as its reader would (an output frame's bytes,
** after its line, through conn_feed_frame), after the connection sent
** requests of every kind it treats apart (ids 1-7): a plain one, process
** requests in each capture mode, quiet or not, an archive read, and one
** given up on (its late reply goes to on_late). The "provider" is a
** process that reads the requests and answers nothing: the input is its
** answer.
**
** Asserts, besides no sanitizer report and no Lua error: every request
** ends at most once from the lines (a result, error or protocol reply),
** on_late runs at most once, and after fail_pending each request that had
** not ended gets exactly one failure and one that had ended none; nothing
** is pending then. A protocol fault stops the connection, as it would;
** it is started again for the next input.
*/
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "check.h"
#include "conn.h"
#include "host.h"
#include "host_state.h"

static const char harness_lua[] =
  "local core = require 'smol.core'\n"
  "local H = {}\n"
  "local conn = assert(core.connect{file = '/bin/sh', args = {'sh', '-c', 'exec cat >/dev/null'},\n"
  "  on_fault = function(why) H.fault = why end})\n"
  "H.conn = conn\n"
  "local late\n"
  "local sent = {\n"
  "  {'describe', '{}'},\n"
  "  {'exec', '{\"argv\":[\"x\"]}', 'events', 64, {'x'}},\n"
  "  {'exec', '{\"argv\":[\"x\"]}', 'copy', 64, {'x'}, true},\n"
  "  {'exec', '{\"argv\":[\"x\"]}', 'none', 0, {'x'}, true},\n"
  "  {'wait', '{\"process_id\":\"p1\"}', 'events', 8, {'x'}},\n"
  "  {'read_archive', '{\"paths\":[\".\"]}'},\n"
  "}\n"
  "function H.send()\n"
  "  H.fault, late, H.rqs = nil, 0, {}\n"
  "  for i, s in ipairs(sent) do H.rqs[i] = assert(conn:send(table.unpack(s))) end\n"
  "  local given_up = assert(conn:send('open', '{}'))\n"
  "  conn:abandon(given_up, function() late = late + 1 end)\n"
  "end\n"
  "local function terminal(kind)\n"
  "  return kind == 'result' or kind == 'error' or kind == 'protocol' or kind == 'failure'\n"
  "end\n"
  "function H.check()\n"
  "  local ended = {}\n"
  "  for i, rq in ipairs(H.rqs) do\n"
  "    repeat\n"
  "      local kind = conn:take(rq)\n"
  "      if kind then\n"
  "        assert(not ended[i], ('request %d: %s after its end'):format(i, kind))\n"
  "        ended[i] = terminal(kind)\n"
  "      end\n"
  "    until not kind\n"
  "  end\n"
  "  assert(late <= 1, 'on_late ran more than once')\n"
  "  conn:fail_pending('fuzz: end of input')\n"
  "  for i, rq in ipairs(H.rqs) do\n"
  "    local kind = conn:take(rq)\n"
  "    if ended[i] then assert(kind == nil, ('request %d: failed after it ended'):format(i))\n"
  "    else assert(kind == 'failure', ('request %d: %s instead of one failure'):format(i, tostring(kind))) end\n"
  "    assert(conn:take(rq) == nil, ('request %d: more than one end'):format(i))\n"
  "  end\n"
  "  assert(conn:pending_count() == 0, 'requests still pending after fail_pending')\n"
  "end\n"
  "return H\n";

static lua_State *L;
static int harness_ref;

/* Calls H[name]() on the harness table; a Lua error is a finding. */
static void call_harness(const char *name) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, harness_ref);
  lua_getfield(L, -1, name);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) fuzz_fail("H.%s: %s", name, lua_tostring(L, -1));
  lua_pop(L, 1);
}

static conn *the_conn(void) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, harness_ref);
  lua_getfield(L, -1, "conn");
  conn *c = conn_check(L, -1);
  lua_pop(L, 2);
  return c;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  L = fuzz_host_state(harness_lua);
  harness_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  call_harness("send");
  conn *c = the_conn();
  char *line = malloc(size + 1);
  for (size_t at = 0; at < size;) {
    const uint8_t *nl = memchr(data + at, '\n', size - at);
    size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
    memcpy(line, data + at, len);   /* writable: a long payload is decoded over itself */
    line[len] = '\0';
    size_t frame = conn_feed_line(L, c, line, len);
    at += len + 1;
    if (frame > 0) {   /* an output frame: its bytes follow the line, as many as the input has */
      size_t n = at < size ? (size - at < frame ? size - at : frame) : 0;
      if (n == frame) conn_feed_frame(L, c, memcpy(line, data + at, n), n);
      at += n;
    }
  }
  free(line);
  uv_run(&host_get()->loop, UV_RUN_NOWAIT);   /* the requests' bytes go to the process */
  call_harness("check");
  if (conn_fuzz_restart(c) < 0) fuzz_fail("requests still pending after fail_pending");
  if (host_get()->failed) fuzz_fail("a callback of the connection raised an error");
  return 0;
}
