/*
** Fuzzing the recording reader (lua/smol/recording/replay.lua, run by the
** host's embedded Lua): each input is a recording file, loaded with
** replay.load, then asked for an `open`, a `describe` and an `exec` the
** way the replay provider asks (find, then mismatch_message when nothing
** matches). Asserts, besides no sanitizer report: a recording is read, or
** refused with an error that is a message of the reader's own (a string
** naming the file), never a Lua runtime error ("attempt to index a nil
** value" and the like) out of its code.
*/
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <lauxlib.h>

#include "check.h"
#include "host.h"
#include "host_state.h"

static const char harness_lua[] =
  "local replay = require 'smol.recording.replay'\n"
  "local asks = {\n"
  "  {'open', {profile = {provider = 'local', name = 'default'}}},\n"
  "  {'describe', {}},\n"
  "  {'exec', {session = {id = 's1'}, argv = {'echo', 'hi'}}},\n"
  "}\n"
  "return function(path)\n"
  "  local ok, rec = pcall(replay.load, path, {ignore = {'params.cwd'}})\n"
  "  if not ok then\n"
  "    if type(rec) ~= 'string' or rec:match('%.lua:%d+:') then error('load raised: ' .. tostring(rec), 0) end\n"
  "    return\n"
  "  end\n"
  "  for _, ask in ipairs(asks) do\n"
  "    local ex = replay.find(rec, ask[1], ask[2])\n"
  "    if ex then ex.used = true else assert(type(replay.mismatch_message(rec, ask[1], ask[2])) == 'string') end\n"
  "  end\n"
  "end\n";

static lua_State *L;
static int check_ref, file = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  L = fuzz_host_state(harness_lua);
  check_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  file = memfd_create("recording.jsonl", MFD_CLOEXEC);
  if (file < 0) fuzz_fail("memfd_create failed");
  snprintf(path, sizeof path, "/proc/self/fd/%d", file);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ftruncate(file, 0) != 0 || pwrite(file, data, size, 0) != (ssize_t)size) fuzz_fail("cannot write the input file");
  lua_rawgeti(L, LUA_REGISTRYINDEX, check_ref);
  lua_pushstring(L, path);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) fuzz_fail("%s", lua_tostring(L, -1));
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
