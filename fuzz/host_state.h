/*
** The host of the host-side harnesses (host_state.c): its loop and its
** main Lua state, set up as main.c sets them up.
*/
#ifndef FUZZ_HOST_STATE_H
#define FUZZ_HOST_STATE_H

#include <lua.h>

/* The host's loop and main state, with the standard libraries and smol.core preloaded; then runs chunk, whose one result it leaves on the stack. */
lua_State *fuzz_host_state(const char *chunk);

#endif
