/*
** The provider connection of conn.h: request lines out, reply lines in,
** one decode path for every line (observed or not), the envelope rules
** of docs/protocol.md ("Transport") and the reply queues.
**
** A reply queue is a Lua table, so smol.task can wait on it (it keeps its
** waiter list in rq.waiters); everything else in it is this file's:
** slots RQ_HEAD..RQ_ERR, then the queued (kind, body) pairs from RQ_FIRST.
** Queues of finished requests are pooled: a request makes no table of
** its own in the common case.
**
** Why all of this in C: it is the hot path of every request. A reply
** line goes from the read buffer to its queue without a call into Lua,
** and a quiet process request (exec without callbacks) keeps its events
** (started, exited, output into core.capture) without making Lua values
** for them or waking its waiter: only the result line reaches Lua.
*/
#define _GNU_SOURCE  /* memmem */
#include "conn.h"

#include "host.h"
#include "plain_line.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>

#include "base64.h"
#include "json_rules.h"

#define CONN_MT "smol.conn"
#define OUTPUT_EVENT_MT "smol.conn.output_event"

/* Lines this long may carry streamed output: their payload is cut out
** before parsing (see decode_split). */
#define SPLIT_MIN 4096

/*
** A process request (exec, wait: sent with a capture mode) also has
** RQ_MODE (EXEC_* of host.h; false for any other request), RQ_QUIET,
** RQ_LIMIT (bytes of each stream to keep), RQ_ARGV (for its result),
** RQ_PID (its `started` event's process_id) and its kept output.
*/
enum { RQ_HEAD = 1, RQ_TAIL, RQ_ID, RQ_MODE, RQ_QUIET, RQ_LIMIT, RQ_ARGV, RQ_PID, RQ_OUT, RQ_ERR, RQ_FIRST };
enum { CONN_RUNNING, CONN_STOPPED, CONN_CLOSED };

struct conn {
  int state;
  proc *proc;                      /* the box's process: valid while the box is held */
  int max_depth;
  size_t max_line;
  lua_Integer next_id, npending, nfree;   /* nfree: queues in the pool */
  int box_ref;                     /* the provider's smol.process */
  int pending_ref, abandoned_ref;  /* id -> rq; id -> on_late or true */
  int free_ref;                    /* pooled queues */
  int infix_ref;                   /* method -> ',"method":"M","params":' */
  int fault_ref, eof_ref, notify_ref, observe_ref;
  int exact_ref;                   /* lua-cjson decode, for lines cJSON cannot keep exactly */
  char *scratch;                   /* a long line without its payload */
  size_t scratch_cap;
  char *frame_head;                /* the line of the frame being read (FRAME_HEAD_MAX bytes) */
  size_t frame_head_len;
};

static void unref(int *ref) { host_unref(ref); }

/*
** The connection at 1 (misuse raises). Methods get the metatable as their
** upvalue: comparing it is cheaper than luaL_checkudata's lookup by name,
** and every request calls a few methods.
*/
static conn *to_conn(lua_State *L) {
  conn *c = lua_touserdata(L, 1);
  if (c == NULL || !lua_getmetatable(L, 1) || !lua_rawequal(L, -1, lua_upvalueindex(1)))
    luaL_typeerror(L, 1, CONN_MT);
  lua_pop(L, 1);
  return c;
}

static conn *check_conn(lua_State *L) {
  conn *c = to_conn(L);
  if (c->state == CONN_CLOSED) luaL_error(L, "attempt to use a closed provider connection");
  return c;
}

static proc *conn_proc(lua_State *L, conn *c) {
  (void)L;
  return c->state == CONN_CLOSED ? NULL : c->proc;
}

/*
** Calls the function below nargs arguments on L's top. On the main state
** (a loop callback: the line sink, a timer) an error is reported, never
** raised through libuv; on a task's thread (a method called by Lua, e.g.
** send's observer) it propagates to the caller, as a Lua call's would.
*/
static void call(lua_State *L, int nargs) {
  if (L == host_get()->L) host_pcall(nargs);
  else lua_call(L, nargs, 0);
}

/* {=================== reply queues ===================} */

static lua_Integer rq_int(lua_State *L, int rq, int slot) {
  lua_rawgeti(L, rq, slot);
  lua_Integer v = lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

static void rq_set_int(lua_State *L, int rq, int slot, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_rawseti(L, rq, slot);
}

/* A process request's own slots, back to false. */
static void clear_slots(lua_State *L, int rq) {
  for (int slot = RQ_MODE; slot <= RQ_ERR; slot++) {
    lua_pushboolean(L, 0);
    lua_rawseti(L, rq, slot);
  }
}

static void rq_reset(lua_State *L, int rq) {
  rq_set_int(L, rq, RQ_HEAD, RQ_FIRST);
  rq_set_int(L, rq, RQ_TAIL, RQ_FIRST - 1);
  clear_slots(L, rq);
}

/* Calls notify(rq) when a task waits on the queue at rq. */
static void wake(lua_State *L, conn *c, int rq) {
  if (lua_getfield(L, rq, "waiters") != LUA_TNIL && c->notify_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->notify_ref);
    lua_pushvalue(L, rq);
    call(L, 1);
  }
  lua_pop(L, 1);
}

/* Appends kind and body (the two values on the top) to the queue at rq; pops them. */
static void rq_push(lua_State *L, conn *c, int rq) {
  lua_Integer tail = rq_int(L, rq, RQ_TAIL);
  lua_rawseti(L, rq, tail + 2);
  lua_rawseti(L, rq, tail + 1);
  rq_set_int(L, rq, RQ_TAIL, tail + 2);
  wake(L, c, rq);
}

static int core_has_reply(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushboolean(L, rq_int(L, 1, RQ_HEAD) <= rq_int(L, 1, RQ_TAIL));
  return 1;
}

/* {=================== faults ===================} */

/* Stops the connection and calls on_fault(why), why on the stack top (popped). */
static void fault(lua_State *L, conn *c) {
  c->state = CONN_STOPPED;
  if (c->fault_ref == LUA_NOREF) {
    lua_pop(L, 1);
    return;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->fault_ref);
  lua_insert(L, -2);
  call(L, 1);
}

static int push_fault(lua_State *L, const char *fmt, const char *a, const char *b) {
  lua_pushfstring(L, fmt, a, b);
  return 0;
}

/* {=================== decoding ===================} */

/* An output event's payload decoded from a long line: its bytes, and the
** stack index of the Lua string holding them (0: none made yet). */
typedef struct payload {
  const char *bytes;
  size_t n;
  int idx;
} payload;

/*
** What a line's envelope says: its id (a cJSON node), its kind and body
** (kind NULL when it has none of result, error, event).
*/
typedef struct envelope {
  const cJSON *id, *body;
  const char *kind;
} envelope;

/* The envelope rules. 0 with the fault's text pushed when they are broken. */
static int check_envelope(lua_State *L, const cJSON *msg, const char *line, size_t len, envelope *e) {
  static const char *const kinds[] = {"result", "error", "event"};
  if (!cJSON_IsObject(msg)) {
    lua_pushlstring(L, line, len < 80 ? len : 80);
    lua_pushfstring(L, "sent a line that is not a JSON object: %s", lua_tostring(L, -1));
    lua_remove(L, -2);
    return 0;
  }
  e->id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  if (e->id == NULL || cJSON_IsNull(e->id) || cJSON_IsFalse(e->id)) {
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
    const char *code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "code"));
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message"));
    return push_fault(L, "sent a reply without an id (%s: %s)", code ? code : "nil", text ? text : "nil");
  }
  e->kind = NULL;
  e->body = NULL;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    e->body = cJSON_GetObjectItemCaseSensitive(msg, kinds[i]);
    if (e->body != NULL) {
      e->kind = kinds[i];
      break;
    }
  }
  return 1;
}

/*
** An id the host could have sent: a string, or an integer of magnitude
** below 2^53. A number beyond is read as a neighbouring double
** (9007199254740993 as ...992): it would be matched to a request it
** does not name. 0 with the fault pushed otherwise.
*/
static int check_id(lua_State *L, const cJSON *id) {
  if (!cJSON_IsNumber(id)) return 1;
  double d = id->valuedouble;
  if (floor(d) == d && fabs(d) < 9007199254740992.0) return 1;
  char text[40];
  snprintf(text, sizeof text, "%.17g", d);
  lua_pushfstring(L, "sent an id that is not an integer of magnitude below 2^53 (read as %s): "
                  "it cannot be matched to a request exactly", text);
  return 0;
}

/*
** A line with \u0000 is decoded twice: by cJSON, whose strings end at
** the NUL, and by lua-cjson into the table at exact, which keeps it. The
** bodies of results and errors come from the table; what the host reads
** from cJSON (the envelope's keys, the id, events) must read the same in
** both, or the line is refused rather than read cut. 0 with the fault
** pushed when it does not.
*/
static int exact_agrees(lua_State *L, const cJSON *msg, const envelope *e, int exact) {
  if (e->kind != NULL && strcmp(e->kind, "event") == 0)
    return push_fault(L, "sent an event holding %s (NUL): the strings of an event may not hold it", "\\u0000", "");
  for (const cJSON *m = msg->child; m != NULL; m = m->next) {
    int found = lua_getfield(L, exact, m->string) != LUA_TNIL;
    if (found && m == e->id && cJSON_IsString(m))
      found = lua_type(L, -1) == LUA_TSTRING && lua_rawlen(L, -1) == strlen(m->valuestring);
    lua_pop(L, 1);
    if (!found) return push_fault(L, "sent a key or an id holding %s (NUL), which the host would read cut at it", "\\u0000", "");
  }
  return 1;
}

/* Only whitespace from p to the end of the line. */
static int only_space(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
  return p == end;
}

/*
** Parses len bytes at text; NULL with the fault pushed when it is not one
** JSON value, or when an object in it has a key twice (cJSON's lookups
** find the first, where another reader of the line, a recording's or a
** person's, may take the last).
*/
static cJSON *parse(lua_State *L, const char *text, size_t len) {
  const char *end = NULL;
  json_arena_reset(&host_get()->json_arena);
  cJSON *msg = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (msg != NULL && only_space(end, text + len)) {
    const char *dup = json_duplicate_key(msg);
    if (dup == NULL) return msg;
    lua_pushfstring(L, "sent a line with the key `%s` twice in one object (duplicate keys are refused)", dup);
    cJSON_Delete(msg);
    return NULL;
  }
  size_t at = end != NULL && end >= text ? (size_t)(end - text) : 0;
  if (msg != NULL)
    lua_pushfstring(L, "sent text after the JSON value (at byte %d of %d): one message per line", (int)at + 1, (int)len);
  else
    lua_pushfstring(L, "sent a line that is not valid JSON (at byte %d of %d)", (int)at + 1, (int)len);
  cJSON_Delete(msg);
  return NULL;
}

/* The type of an event object ("stdout", ...), or NULL. */
static const char *event_type(const cJSON *ev) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "type"));
}

static int is_output(const char *type) {
  return type != NULL && (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0);
}

/* Events whose data_base64 is a payload decoded into `data`: output, and the archive extension's chunks. */
static int has_payload(const char *type) {
  return is_output(type) || (type != NULL && strcmp(type, "chunk") == 0);
}

/* {=================== quiet process requests ===================} */

/* The request's mode (EXEC_*; EXEC_PLAIN for a request that is not a process request). */
static int rq_mode(lua_State *L, int rq) {
  return (int)rq_int(L, rq, RQ_MODE);
}

/* Appends bytes to the rq's capture for stream slot (RQ_OUT or RQ_ERR), made on first use. */
static int keep_output(lua_State *L, int rq, int slot, const char *bytes, size_t n) {
  if (rq_mode(L, rq) != EXEC_EVENTS) return 1;   /* the output is not kept here */
  capture *kept;
  if (lua_rawgeti(L, rq, slot) == LUA_TUSERDATA) {
    kept = lua_touserdata(L, -1);
  } else {
    lua_pop(L, 1);
    kept = capture_push(L, (size_t)rq_int(L, rq, RQ_LIMIT));
    lua_pushvalue(L, -1);
    lua_rawseti(L, rq, slot);
  }
  lua_pop(L, 1);
  return capture_add(kept, bytes, n);
}

static void keep_pid(lua_State *L, int rq, const char *pid, size_t n) {
  lua_pushlstring(L, pid, n);
  lua_rawseti(L, rq, RQ_PID);
}

/*
** A quiet request's event, handled here when it is one the client would
** only have looked at (started, exited, dropped, valid output); 0 leaves
** it to the queue, where the client judges it. bytes: the stack index of
** the payload already decoded from a long line, or 0.
*/
static int absorb(lua_State *L, int rq, const cJSON *ev, const payload *pl) {
  const char *type = event_type(ev);
  if (type == NULL) return 0;
  if (strcmp(type, "exited") == 0 || strcmp(type, "dropped") == 0) return 1;
  if (strcmp(type, "started") == 0) {
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(ev, "process_id");
    if (pid != NULL && !cJSON_IsString(pid)) return 0;
    if (pid != NULL) keep_pid(L, rq, pid->valuestring, strlen(pid->valuestring));
    return 1;
  }
  if (!is_output(type)) return 0;
  int slot = type[3] == 'o' ? RQ_OUT : RQ_ERR;
  size_t n;
  if (pl) return keep_output(L, rq, slot, pl->bytes, pl->n);
  const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "data_base64"));
  if (text == NULL || !b64_push(L, text, strlen(text))) return 0;
  const char *data = lua_tolstring(L, -1, &n);
  int ok = keep_output(L, rq, slot, data, n);
  lua_pop(L, 1);
  return ok;
}

/*
** An event of a process request that is not quiet, decoded into the
** table at ev and queued for the client: the connection still keeps its
** process_id and its output, as for a quiet one.
*/
static void note_event(lua_State *L, int rq, int ev, int stream, int started) {
  if (stream) {
    size_t n;
    if (lua_getfield(L, ev, "data") == LUA_TSTRING) {
      const char *data = lua_tolstring(L, -1, &n);
      keep_output(L, rq, stream, data, n);
    }
    lua_pop(L, 1);
  } else if (started) {
    size_t n;
    if (lua_getfield(L, ev, "process_id") == LUA_TSTRING) {
      const char *pid = lua_tolstring(L, -1, &n);
      keep_pid(L, rq, pid, n);
    }
    lua_pop(L, 1);
  }
}

/*
** Pushes the process request's result (exec_result.c) from its result
** object (json, or the table at exact when lua-cjson decoded the line);
** returns the kind to queue: "result", or "protocol" with the message
** pushed instead.
*/
static const char *finish_process_with(lua_State *L, int rq, const exec_fields *f, int mode);

static const char *finish_process(lua_State *L, int rq, const cJSON *json, int exact, int mode) {
  int top = lua_gettop(L);
  exec_fields f;
  if (exact) {
    lua_getfield(L, exact, "result");
    exec_fields_from_table(L, lua_gettop(L), &f);
  } else {
    exec_fields_from_json(L, json, &f);
  }
  const char *kind = finish_process_with(L, rq, &f, mode);
  host_keep_top(L, top);
  return kind;
}

/* finish_process for fields already on the stack. */
static const char *finish_process_with(lua_State *L, int rq, const exec_fields *f, int mode) {
  int top = lua_gettop(L);
  exec_kept k = {mode, 0, 0, 0, 0, 0};
  lua_rawgeti(L, rq, RQ_LIMIT);
  k.limit = (size_t)lua_tointeger(L, -1);
  lua_pop(L, 1);
  int *idx[] = {&k.argv, &k.pid, &k.out, &k.err};
  for (int slot = RQ_ARGV; slot <= RQ_ERR; slot++) {
    lua_rawgeti(L, rq, slot);
    *idx[slot - RQ_ARGV] = lua_toboolean(L, -1) ? lua_gettop(L) : 0;
  }
  int ok = exec_result_push(L, f, &k);
  host_keep_top(L, top);
  return ok ? "result" : "protocol";
}

/* {=================== routing ===================} */

/* The request with the id at idx has ended: it is no longer pending. */
static void forget_pending(lua_State *L, conn *c, int id) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->pending_ref);
  lua_pushvalue(L, id);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  c->npending--;
}

/* Pushes the queue of the request with the id at idx, or nil. */
static void push_pending(lua_State *L, conn *c, int id_idx) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->pending_ref);
  lua_pushvalue(L, id_idx);
  lua_rawget(L, -2);
  lua_remove(L, -2);
}

/* The id at idx as the line wrote it (near enough for a message): "x" for a string. */
static const char *id_json(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TSTRING) return lua_pushfstring(L, "\"%s\"", lua_tostring(L, idx));
  if (lua_type(L, idx) == LUA_TTABLE) return lua_pushliteral(L, "(an object or array)");
  return luaL_tolstring(L, idx, NULL);
}

/*
** A reply for an id nobody waits for: one given up on (its terminal reply
** goes to on_late), or a fault. stack: id at id, then (when kind is not
** NULL) the body at body.
*/
static void stray(lua_State *L, conn *c, int id, const char *kind, int body) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->abandoned_ref);
  int abandoned = lua_gettop(L);
  lua_pushvalue(L, id);
  if (lua_rawget(L, abandoned) == LUA_TNIL) {
    lua_pushfstring(L, "sent a reply for unknown request id %s", id_json(L, id));
    fault(L, c);
    return;
  }
  if (kind == NULL || strcmp(kind, "event") == 0) return;
  lua_pushvalue(L, id);
  lua_pushnil(L);
  lua_rawset(L, abandoned);
  if (lua_isfunction(L, -1)) {   /* on_late: must not yield; its error is its own */
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, body);
    lua_setfield(L, -2, kind);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1);
  }
}

/* The decoded payload (stack top) becomes the event's `data` (event at ev). */
static void set_data(lua_State *L, int ev) {
  lua_setfield(L, ev, "data");
}

/* A long line's event: data from the cut payload, data_base64 made on demand. */
static void set_split_data(lua_State *L, int ev, const payload *pl) {
  if (pl->idx) lua_pushvalue(L, pl->idx);
  else lua_pushlstring(L, pl->bytes, pl->n);
  set_data(L, ev);
  lua_pushnil(L);
  lua_setfield(L, ev, "data_base64");
  luaL_setmetatable(L, OUTPUT_EVENT_MT);
}

/* A short line's output event keeps data_base64 and gets data (when valid). */
static void add_data(lua_State *L, const cJSON *ev, int ev_idx) {
  const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "data_base64"));
  if (text != NULL && b64_push(L, text, strlen(text))) set_data(L, ev_idx);
}

/*
** Routes the parsed message msg. bytes: stack index of the payload cut
** from a long line, or 0. exact: stack index of lua-cjson's decode of the
** whole line (for a line with \u0000), or 0. Frees msg before any call
** into Lua (the arena is shared).
*/
static void route(lua_State *L, conn *c, cJSON *msg, const char *line, size_t len, const payload *pl, int exact) {
  envelope e;
  if (!check_envelope(L, msg, line, len, &e) || !check_id(L, e.id) || (exact && !exact_agrees(L, msg, &e, exact))) {
    cJSON_Delete(msg);
    fault(L, c);
    return;
  }
  if (!json_push(L, e.id, c->max_depth, 1)) {
    cJSON_Delete(msg);
    lua_pushfstring(L, "sent an id nested deeper than %d levels", c->max_depth);
    fault(L, c);
    return;
  }
  int id = lua_gettop(L);
  push_pending(L, c, id);
  int rq = lua_istable(L, -1) ? lua_gettop(L) : 0;
  int is_event = e.kind != NULL && strcmp(e.kind, "event") == 0;
  int mode = rq ? rq_mode(L, rq) : EXEC_PLAIN;
  if (mode != EXEC_PLAIN && is_event) {
    lua_rawgeti(L, rq, RQ_QUIET);
    int quiet = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (quiet && cJSON_IsObject(e.body) && absorb(L, rq, e.body, pl)) {
      cJSON_Delete(msg);
      return;
    }
  }
  const char *type = is_event ? event_type(e.body) : NULL;
  int output = is_event && cJSON_IsObject(e.body) && has_payload(type);
  int stream = output && is_output(type) ? (type[3] == 'o' ? RQ_OUT : RQ_ERR) : 0;   /* (type dies with msg) */
  int started = type != NULL && strcmp(type, "started") == 0;
  const char *kind = e.kind;   /* a static string: outlives msg */
  if (mode != EXEC_PLAIN && kind != NULL && kind[0] == 'r') {
    lua_pushnil(L);   /* the kind, once known */
    kind = finish_process(L, rq, e.body, exact, mode);
    lua_pushstring(L, kind);
    lua_replace(L, -3);
  } else if (e.kind != NULL) {
    lua_pushstring(L, e.kind);
    if (exact) {
      lua_getfield(L, exact, e.kind);
    } else if (!json_push(L, e.body, c->max_depth, 2)) {
      cJSON_Delete(msg);
      lua_pushfstring(L, "sent a line nested deeper than %d levels (too many nested arrays or objects)", c->max_depth);
      fault(L, c);
      return;
    }
    if (output && lua_istable(L, -1)) {
      if (pl) set_split_data(L, lua_gettop(L), pl);
      else add_data(L, e.body, lua_gettop(L));
    }
  }
  cJSON_Delete(msg);
  if (mode != EXEC_PLAIN && is_event && lua_istable(L, -1)) note_event(L, rq, lua_gettop(L), stream, started);
  if (!rq) {
    stray(L, c, id, kind, id + 3);
    return;
  }
  if (kind == NULL) {
    lua_pushfstring(L, "sent a reply for request %s with none of event, result, error", id_json(L, id));
    fault(L, c);
    return;
  }
  if (!is_event) forget_pending(L, c, id);
  rq_push(L, c, rq);
}

/*
** A long line: its data_base64 payload cut out and decoded on its own
** (see above). A payload of IN_PLACE_MIN or more is decoded over its own
** text in the line (the reader's buffer, ours to change once observed):
** the host then holds the line and, only where a Lua value is needed, one
** copy of the bytes (bench/line_bench.lua), not a decoded buffer besides.
*/
#define IN_PLACE_MIN ((size_t)1 << 20)

static int decode_split(lua_State *L, conn *c, char *line, size_t len) {
  static const char key[] = "\"data_base64\":\"";
  char *at = memmem(line, len, key, sizeof key - 1);
  if (at == NULL) return 0;
  char *first = at + sizeof key - 1, *end = line + len;
  char *close = memchr(first, '"', (size_t)(end - first));
  if (close == NULL) return 0;
  size_t head = (size_t)(first - line), rest = (size_t)(end - close), n = head + rest;
  if (n > c->scratch_cap) {
    char *p = realloc(c->scratch, n);
    if (p == NULL) return 0;
    c->scratch = p;
    c->scratch_cap = n;
  }
  memcpy(c->scratch, line, head);
  memcpy(c->scratch + head, close, rest);
  int top = lua_gettop(L);
  cJSON *msg = parse(L, c->scratch, n);
  const cJSON *ev = msg ? cJSON_GetObjectItemCaseSensitive(msg, "event") : NULL;
  const cJSON *empty = ev ? cJSON_GetObjectItemCaseSensitive(ev, "data_base64") : NULL;
  payload pl = {first, 0, 0};
  size_t text = (size_t)(close - first);
  int ok = msg != NULL && cJSON_GetObjectItemCaseSensitive(msg, "result") == NULL &&
           cJSON_GetObjectItemCaseSensitive(msg, "error") == NULL && has_payload(event_type(ev)) &&
           cJSON_IsString(empty) && empty->valuestring[0] == '\0';
  if (ok && text >= IN_PLACE_MIN) {
    ok = b64_decode_in_place(first, text, &pl.n) == 0;
  } else if (ok && (ok = b64_push(L, first, text))) {
    pl.idx = lua_gettop(L);
    pl.bytes = lua_tolstring(L, pl.idx, &pl.n);
  }
  if (!ok) {
    cJSON_Delete(msg);
    lua_settop(L, top);   /* whatever parse pushed */
    return 0;
  }
  route(L, c, msg, line, len, &pl, 0);
  return 1;
}

/* lua-cjson's decode of the line (pushed), for strings with NUL bytes cJSON cannot hold. */
static int push_exact(lua_State *L, conn *c, const char *line, size_t len) {
  if (c->exact_ref == LUA_NOREF) {
    lua_getglobal(L, "require");
    lua_pushliteral(L, "cjson.safe");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) return 0;
    lua_getfield(L, -1, "new");
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) return 0;
    lua_getfield(L, -1, "decode_max_depth");
    lua_pushinteger(L, c->max_depth);
    lua_pcall(L, 1, 0, 0);
    lua_getfield(L, -1, "decode");
    c->exact_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pop(L, 2);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->exact_ref);
  lua_pushlstring(L, line, len);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_istable(L, -1)) return 0;
  return 1;
}

/*
** A line in the usual bytes of an exec's started, exited or result line
** (plain_line.c), taken without parsing when it is for a process request
** that would only have looked at it: a quiet one's events, any one's
** result. Returns 1 when the line was taken; 0 leaves it to cJSON.
*/
static int take_plain(lua_State *L, conn *c, const char *line, size_t len) {
  plain_line m;
  if (!plain_line_match(line, len, &m)) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->pending_ref);
  if (lua_rawgeti(L, -1, (lua_Integer)m.id) != LUA_TTABLE) return 0;   /* not ours to take: cJSON decides */
  int rq = lua_gettop(L);
  int mode = rq_mode(L, rq);
  if (mode == EXEC_PLAIN) return 0;
  if (m.kind == PLAIN_RESULT) {
    lua_pushinteger(L, (lua_Integer)m.id);
    int id = lua_gettop(L);
    lua_pushnil(L);   /* the kind, once known */
    int base = lua_gettop(L);
    exec_fields f = {0};
    f.object = 1;
    lua_pushinteger(L, (lua_Integer)m.exit_code);
    f.exit_code = lua_gettop(L);
    lua_pushliteral(L, "");
    f.out_b64 = f.err_b64 = lua_gettop(L);
    const char *kind = finish_process_with(L, rq, &f, mode);
    host_keep_top(L, base);
    lua_pushstring(L, kind);
    lua_replace(L, base);
    forget_pending(L, c, id);
    rq_push(L, c, rq);
    return 1;
  }
  lua_rawgeti(L, rq, RQ_QUIET);
  if (!lua_toboolean(L, -1)) return 0;
  if (m.kind == PLAIN_STARTED) keep_pid(L, rq, m.process_id, m.process_id_len);
  return 1;
}

/* A line (not a frame's): try_plain unless take_plain has seen it already. */
static void decode(lua_State *L, conn *c, char *line, size_t len, int try_plain) {
  if (len >= SPLIT_MIN && decode_split(L, c, line, len)) return;
  if (try_plain && len < 128 && take_plain(L, c, line, len)) return;
  int exact = 0;
  if (memchr(line, '\\', len) != NULL && memmem(line, len, "\\u0000", 6) != NULL) {
    if (push_exact(L, c, line, len)) exact = lua_gettop(L);
  }
  cJSON *msg = parse(L, line, len);
  if (msg == NULL) {
    fault(L, c);
    return;
  }
  route(L, c, msg, line, len, 0, exact);
}

static void observe(lua_State *L, conn *c, const char *direction, int line_idx) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->observe_ref);
  lua_pushstring(L, direction);
  lua_pushvalue(L, line_idx);
  call(L, 2);
}

static void on_end(lua_State *L, conn *c, const char *err) {
  if (err != NULL && strncmp(err, READER_FRAME_CUT, sizeof READER_FRAME_CUT - 1) == 0) {
    lua_pushfstring(L, "sent %s", err);
    fault(L, c);
  } else if (err != NULL) {
    char limit[32];
    snprintf(limit, sizeof limit, "%zu", c->max_line);
    lua_pushfstring(L, "sent an unreadable or too long line (limit %s bytes): %s", limit, err);
    fault(L, c);
  } else if (c->eof_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->eof_ref);
    call(L, 0);
  }
}

/* {=================== output frames ===================} */

/*
** A frame (docs/protocol.md, "raw_output") is an output event whose line
** says `"data_bytes":N` in place of data_base64; its N bytes follow the
** line as they are. A frame's line is short: a longer one is none.
*/
#define FRAME_HEAD_MAX 512

/*
** The byte count of the frame whose line this is (the line kept for
** frame_ends), or -1 when the line is none (decoded as usual). A frame's
** line that breaks the rules faults the connection, and is none either.
*/
static long long frame_begins(lua_State *L, conn *c, const char *line, size_t len) {
  if (len >= FRAME_HEAD_MAX || memmem(line, len, "\"data_bytes\"", 12) == NULL) return -1;
  cJSON *msg = parse(L, line, len);
  if (msg == NULL) return -1;   /* not JSON: decode reports it (the message it pushed goes) */
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(msg, "event");
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(ev, "data_bytes");
  if (n == NULL) {
    cJSON_Delete(msg);
    return -1;
  }
  const char *type = event_type(ev), *why = NULL;
  if (!is_output(type)) why = "an event that is not stdout or stderr";
  else if (cJSON_GetObjectItemCaseSensitive(ev, "data_base64") != NULL) why = "an event with both data_bytes and data_base64";
  else if (!cJSON_IsNumber(n) || n->valuedouble < 0 || n->valuedouble != floor(n->valuedouble) ||
           n->valuedouble > (double)c->max_line) why = "a data_bytes that is no byte count within the line limit";
  else if (memmem(line, len, "\\u0000", 6) != NULL) why = "a frame's line holding \\u0000";
  long long bytes = why ? 0 : (long long)n->valuedouble;
  cJSON_Delete(msg);
  if (why != NULL) {
    lua_pushlstring(L, line, len);
    lua_pushfstring(L, "sent an output frame with %s: %s", why, lua_tostring(L, -1));
    lua_remove(L, -2);
    fault(L, c);
    return -1;
  }
  if (c->frame_head == NULL && (c->frame_head = malloc(FRAME_HEAD_MAX)) == NULL) abort();
  memcpy(c->frame_head, line, len);
  c->frame_head[len] = '\0';
  c->frame_head_len = len;
  return bytes;
}

/*
** An observer sees the frame as the line it stands for: the event with
** its data_base64, as a provider without raw_output sends it (so a
** recording replays through the usual path).
*/
static void observe_frame(lua_State *L, conn *c, const char *data, size_t n) {
  char *text = malloc(b64_encoded_len(n) + 1);
  if (text == NULL) abort();
  text[b64_encode((const unsigned char *)data, n, text)] = '\0';
  cJSON *msg = parse(L, c->frame_head, c->frame_head_len);
  if (msg == NULL) abort();   /* frame_begins parsed it */
  cJSON *ev = cJSON_GetObjectItemCaseSensitive(msg, "event");
  cJSON_DeleteItemFromObjectCaseSensitive(ev, "data_bytes");
  cJSON_AddStringToObject(ev, "data_base64", text);
  free(text);
  char *line = cJSON_PrintUnformatted(msg);
  cJSON_Delete(msg);
  if (line == NULL) abort();
  lua_pushstring(L, line);
  cJSON_free(line);
  observe(L, c, "recv", lua_gettop(L));
}

/*
** The frame's bytes came (data, n): its event is routed as its line's
** would be, with the bytes as the payload cut from a long line. The line
** is parsed again: the bytes may come reads later, and any parse in
** between resets the arena its first tree lived in (json_arena.h).
*/
static void frame_ends(lua_State *L, conn *c, char *data, size_t n) {
  if (c->observe_ref != LUA_NOREF) observe_frame(L, c, data, n);
  if (c->state != CONN_RUNNING) return;   /* the observer stopped it */
  size_t len = c->frame_head_len;
  cJSON *msg = parse(L, c->frame_head, len);
  if (msg == NULL) abort();
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(msg, "event"), "data_bytes");
  payload pl = {data, n, 0};
  route(L, c, msg, c->frame_head, len, &pl, 0);
}

/* The stdout sink: every line the provider writes, then its end. */
static size_t on_stdout(void *ctx, char *line, size_t len, const char *err) {
  conn *c = ctx;
  lua_State *L = host_get()->L;
  int top = lua_gettop(L);
  size_t frame = 0;
  if (line == NULL) {
    on_end(L, c, err);
  } else {
    frame = conn_feed_line(L, c, line, len);
  }
  lua_settop(L, top);
  return frame;
}

static void on_frame(void *ctx, char *data, size_t n) {
  conn_feed_frame(host_get()->L, ctx, data, n);
}

size_t conn_feed_line(lua_State *L, conn *c, char *line, size_t len) {
  int top = lua_gettop(L);
  int running = len > 0 && c->state == CONN_RUNNING, observed = c->observe_ref != LUA_NOREF;
  /* An exec's started, exited or result line, taken whole: the common line, and never a frame's. */
  int taken = running && !observed && len < 128 && take_plain(L, c, line, len);
  lua_settop(L, top);
  if (taken) return 0;
  long long frame = running ? frame_begins(L, c, line, len) : -1;
  lua_settop(L, top);
  if (frame >= 0) {
    if (frame == 0) conn_feed_frame(L, c, NULL, 0);   /* an empty frame: nothing follows its line */
    return (size_t)frame;
  }
  if (observed) {
    lua_pushlstring(L, line, len);
    observe(L, c, "recv", lua_gettop(L));
  }
  if (running && c->state == CONN_RUNNING) decode(L, c, line, len, observed);
  lua_settop(L, top);
  return 0;
}

void conn_feed_frame(lua_State *L, conn *c, char *data, size_t n) {
  int top = lua_gettop(L);
  if (c->state == CONN_RUNNING && c->frame_head != NULL) frame_ends(L, c, data != NULL ? data : "", n);
  lua_settop(L, top);
}

#ifdef SMOLWF_FUZZ
int conn_fuzz_restart(conn *c) {
  if (c->npending != 0) return -1;
  c->state = CONN_RUNNING;
  c->next_id = 1;
  return 0;
}
#endif

conn *conn_check(lua_State *L, int idx) {
  return luaL_checkudata(L, idx, CONN_MT);
}

/* {=================== requests ===================} */

/* The text between a request's id and its params, for a method name (checked once). */
static void push_infix(lua_State *L, conn *c, int method) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->infix_ref);
  lua_pushvalue(L, method);
  if (lua_rawget(L, -2) == LUA_TSTRING) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  size_t n;
  const char *name = lua_tolstring(L, method, &n);
  int ok = n > 0;
  for (size_t i = 0; i < n && ok; i++)
    ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
         (name[i] >= '0' && name[i] <= '9') || name[i] == '_';
  if (!ok) luaL_argerror(L, method, lua_pushfstring(L, "method must be a name, got \"%s\"", name));
  lua_pushfstring(L, ",\"method\":\"%s\",\"params\":", name);
  lua_pushvalue(L, method);
  lua_pushvalue(L, -2);
  lua_rawset(L, -4);
  lua_remove(L, -2);
}

/* A pooled queue, or a new one, on the stack top. */
static void push_queue(lua_State *L, conn *c) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->free_ref);
  lua_Integer n = c->nfree;
  if (n > 0) {
    lua_rawgeti(L, -1, n);
    lua_pushnil(L);
    lua_rawseti(L, -3, n);
    c->nfree--;
  } else {
    lua_createtable(L, RQ_FIRST + 5, 1);
    rq_reset(L, lua_gettop(L));
  }
  lua_remove(L, -2);
}

/* The decimal digits of v at the end of buf[24]; returns their start. */
static char *format_id(lua_Integer v, char *buf) {
  char *p = buf + 24;
  unsigned long long u = (unsigned long long)v;   /* ids are positive */
  do *--p = (char)('0' + u % 10); while ((u /= 10) != 0);
  return p;
}

/* A process request's capture mode argument (4): EXEC_* or EXEC_PLAIN when absent. */
static int check_mode(lua_State *L) {
  static const char *const modes[] = {"events", "copy", "none", NULL};
  if (lua_isnoneornil(L, 4)) return EXEC_PLAIN;
  int mode = luaL_checkoption(L, 4, NULL, modes) + EXEC_EVENTS;
  lua_Integer limit = luaL_checkinteger(L, 5);
  luaL_argcheck(L, limit >= 0, 5, "the output to keep must be a non-negative integer");
  luaL_checktype(L, 6, LUA_TTABLE);
  return mode;
}

/* The slots of a process request: its mode, quiet flag, limit and argv (args 4-7). */
static void set_process(lua_State *L, int rq, int mode) {
  lua_pushinteger(L, mode);
  lua_rawseti(L, rq, RQ_MODE);
  lua_pushboolean(L, lua_toboolean(L, 7));
  lua_rawseti(L, rq, RQ_QUIET);
  lua_pushvalue(L, 5);
  lua_rawseti(L, rq, RQ_LIMIT);
  lua_pushvalue(L, 6);
  lua_rawseti(L, rq, RQ_ARGV);
}

/* conn:send(method, params_json [, capture, limit, argv, quiet]) -> rq | nil, why */
static int conn_send(lua_State *L) {
  conn *c = check_conn(L);
  luaL_checkstring(L, 2);
  size_t params_len;
  const char *params = luaL_checklstring(L, 3, &params_len);
  int mode = check_mode(L);
  lua_settop(L, 7);
  if (c->state != CONN_RUNNING) {
    luaL_pushfail(L);
    lua_pushliteral(L, "the connection is stopped");
    return 2;
  }
  lua_Integer id = c->next_id++;
  push_infix(L, c, 2);   /* at 8 */
  size_t infix_len;
  const char *infix = lua_tolstring(L, 8, &infix_len);
  char digits[24];
  char *id_text = format_id(id, digits);
  uv_buf_t bufs[5] = {uv_buf_init((char *)"{\"id\":", 6), uv_buf_init(id_text, (unsigned)(digits + 24 - id_text)),
                      uv_buf_init((char *)infix, (unsigned)infix_len), uv_buf_init((char *)params, (unsigned)params_len),
                      uv_buf_init((char *)"}\n", 2)};
  if (c->observe_ref != LUA_NOREF) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; i < 5; i++) luaL_addlstring(&b, bufs[i].base, bufs[i].len - (i == 4));
    luaL_pushresult(&b);   /* the line without its newline */
    observe(L, c, "send", lua_gettop(L));
    lua_settop(L, 8);
  }
  int rc = process_write_bufs(L, conn_proc(L, c), bufs, 5);
  lua_settop(L, 7);
  if (rc != 0) {
    luaL_pushfail(L);
    lua_pushstring(L, uv_strerror(rc));
    return 2;
  }
  push_queue(L, c);
  int rq = lua_gettop(L);
  rq_set_int(L, rq, RQ_ID, id);
  if (mode != EXEC_PLAIN) set_process(L, rq, mode);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->pending_ref);
  lua_pushvalue(L, rq);
  lua_rawseti(L, -2, id);
  lua_pop(L, 1);
  c->npending++;
  return 1;
}

/*
** The request at rq ended with its reply (take found result or error):
** its queue is pooled. Only what the request set is reset: a process
** request's slots, and head and tail when replies came after the end
** (drained: none did).
*/
static void recycle(lua_State *L, conn *c, int rq, int drained) {
  if (rq_mode(L, rq) != EXEC_PLAIN) clear_slots(L, rq);
  if (!drained) {   /* what came after the end (a failure from a late timer) */
    lua_Integer head = rq_int(L, rq, RQ_HEAD), tail = rq_int(L, rq, RQ_TAIL);
    for (lua_Integer i = head; i <= tail; i++) {
      lua_pushnil(L);
      lua_rawseti(L, rq, i);
    }
    rq_set_int(L, rq, RQ_HEAD, RQ_FIRST);
    rq_set_int(L, rq, RQ_TAIL, RQ_FIRST - 1);
  }
  if (c->free_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->free_ref);
    lua_pushvalue(L, rq);
    lua_rawseti(L, -2, ++c->nfree);
    lua_pop(L, 1);
  }
}

/* conn:take(rq) -> kind, body | nil (after a result or an error, rq is pooled: see recycle) */
static int conn_take(lua_State *L) {
  conn *c = to_conn(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  lua_Integer head = rq_int(L, 2, RQ_HEAD), tail = rq_int(L, 2, RQ_TAIL);
  if (head > tail) return 0;
  lua_rawgeti(L, 2, head);
  lua_rawgeti(L, 2, head + 1);
  lua_pushnil(L);
  lua_rawseti(L, 2, head);
  lua_pushnil(L);
  lua_rawseti(L, 2, head + 1);
  int drained = head + 2 > tail;
  if (drained) {
    rq_set_int(L, 2, RQ_HEAD, RQ_FIRST);
    rq_set_int(L, 2, RQ_TAIL, RQ_FIRST - 1);
  } else {
    rq_set_int(L, 2, RQ_HEAD, head + 2);
  }
  const char *kind = lua_tostring(L, 3);
  /* result, error, protocol: the request ended */
  if (kind[0] == 'r' || kind[0] == 'p' || (kind[0] == 'e' && kind[1] == 'r')) recycle(L, c, 2, drained);
  return 2;
}

/* conn:fail(rq, err): a failure for the request's waiter */
static int conn_fail(lua_State *L) {
  conn *c = check_conn(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checkany(L, 3);
  lua_settop(L, 3);
  lua_pushliteral(L, "failure");
  lua_pushvalue(L, 3);
  rq_push(L, c, 2);
  return 0;
}

/* conn:fail_pending(err): every request in flight fails with err */
static int conn_fail_pending(lua_State *L) {
  conn *c = to_conn(L);
  luaL_checkany(L, 2);
  lua_settop(L, 2);
  if (c->pending_ref == LUA_NOREF) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->pending_ref);
  lua_newtable(L);   /* the queues, taken out first: a woken waiter may send */
  int failed = lua_gettop(L), n = 0;
  lua_pushnil(L);
  while (lua_next(L, 3) != 0) lua_rawseti(L, failed, ++n);
  lua_newtable(L);
  lua_rawseti(L, LUA_REGISTRYINDEX, c->pending_ref);
  lua_newtable(L);
  lua_rawseti(L, LUA_REGISTRYINDEX, c->abandoned_ref);
  c->npending = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, failed, i);
    lua_pushliteral(L, "failure");
    lua_pushvalue(L, 2);
    rq_push(L, c, lua_gettop(L) - 2);
    lua_pop(L, 1);
  }
  return 0;
}

/* conn:abandon(rq [, on_late]) -> process_id */
static int conn_abandon(lua_State *L) {
  conn *c = to_conn(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 3);
  if (c->pending_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->pending_ref);
    lua_rawgeti(L, 2, RQ_ID);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, -3) == LUA_TTABLE && lua_rawequal(L, -1, 2)) {
      lua_pop(L, 1);
      lua_pushvalue(L, -1);
      lua_pushnil(L);
      lua_rawset(L, -4);                /* pending[id] = nil */
      lua_rawgeti(L, LUA_REGISTRYINDEX, c->abandoned_ref);
      lua_insert(L, -2);
      if (lua_isnil(L, 3)) lua_pushboolean(L, 1);
      else lua_pushvalue(L, 3);
      lua_rawset(L, -3);                /* abandoned[id] = on_late or true */
      c->npending--;
    }
    lua_settop(L, 3);
  }
  lua_rawgeti(L, 2, RQ_PID);
  if (!lua_toboolean(L, -1)) lua_pushnil(L);
  return 1;
}

/* {=================== the connection ===================} */

static int conn_stop(lua_State *L) {
  conn *c = check_conn(L);
  c->state = CONN_STOPPED;
  return 0;
}

static int conn_observe(lua_State *L) {
  conn *c = check_conn(L);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TFUNCTION);
  unref(&c->observe_ref);
  if (!lua_isnoneornil(L, 2)) {
    lua_settop(L, 2);
    c->observe_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  return 0;
}

static int conn_close_stdin(lua_State *L) {
  conn *c = check_conn(L);
  process_close_stdin(conn_proc(L, c));
  return 0;
}

/* conn:kill([sig]) -> true | nil, "kill PID: message", "ESRCH" */
static int conn_kill(lua_State *L) {
  conn *c = check_conn(L);
  int signo = lua_isnoneornil(L, 2) ? SIGTERM : host_check_signal(L, 2);
  proc *p = conn_proc(L, c);
  if (process_kill(p, signo) != 0) {
    int e = errno;
    luaL_pushfail(L);
    lua_pushfstring(L, "kill %d: %s", p ? process_pid(p) : 0, strerror(e));
    lua_pushstring(L, uv_err_name(uv_translate_sys_error(e)));
    return 3;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int conn_pending_count(lua_State *L) {
  conn *c = check_conn(L);
  lua_pushinteger(L, c->npending);
  return 1;
}

/* Lets go of everything: the process box (closed), callbacks, queues. Idempotent. */
static void release(lua_State *L, conn *c) {
  if (c->state == CONN_CLOSED) return;
  c->state = CONN_CLOSED;
  c->proc = NULL;
  if (c->box_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->box_ref);
    proc *p = process_of(L, -1);
    if (p != NULL) process_sink_stdout(p, (line_sink){NULL, NULL, NULL});
    if (luaL_getmetafield(L, -1, "__close") != LUA_TNIL) {
      lua_pushvalue(L, -2);
      lua_pcall(L, 1, 0, 0);
    }
    lua_pop(L, 1);
  }
  int *refs[] = {&c->box_ref, &c->pending_ref, &c->abandoned_ref, &c->free_ref, &c->infix_ref,
                 &c->fault_ref, &c->eof_ref, &c->notify_ref, &c->observe_ref, &c->exact_ref};
  for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) unref(refs[i]);
  free(c->scratch);
  c->scratch = NULL;
  free(c->frame_head);
  c->frame_head = NULL;
}

/* conn:close(): the provider's exit was seen; what is left goes */
static int conn_close(lua_State *L) {
  release(L, to_conn(L));
  return 0;
}

static int conn_tostring(lua_State *L) {
  conn *c = to_conn(L);
  static const char *const states[] = {"running", "stopped", "closed"};
  lua_pushfstring(L, "smol.conn (%s)", states[c->state]);
  return 1;
}

/* conn:pid() -> the provider's process id */
static int conn_pid(lua_State *L) {
  conn *c = check_conn(L);
  lua_pushinteger(L, c->proc ? process_pid(c->proc) : 0);
  return 1;
}

static int ref_callback(lua_State *L, int opts, const char *name) {
  if (lua_getfield(L, opts, name) == LUA_TNIL) {
    lua_pop(L, 1);
    return LUA_NOREF;
  }
  if (!lua_isfunction(L, -1)) luaL_error(L, "core.connect: %s must be a function", name);
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

static int new_table_ref(lua_State *L) {
  lua_newtable(L);
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

static conn *new_conn(lua_State *L, int opts) {
  conn *c = lua_newuserdatauv(L, sizeof *c, 0);
  memset(c, 0, sizeof *c);
  c->state = CONN_CLOSED;   /* until everything is in place */
  c->box_ref = c->pending_ref = c->abandoned_ref = c->free_ref = c->infix_ref = LUA_NOREF;
  c->fault_ref = c->eof_ref = c->notify_ref = c->observe_ref = c->exact_ref = LUA_NOREF;
  luaL_setmetatable(L, CONN_MT);
  lua_getfield(L, opts, "max_depth");
  c->max_depth = (int)luaL_optinteger(L, -1, 128);
  lua_pop(L, 1);
  lua_getfield(L, opts, "max_line");
  lua_Integer max_line = luaL_optinteger(L, -1, 256 * 1024 * 1024);
  c->max_line = max_line > 0 ? (size_t)max_line : 0;
  lua_pop(L, 1);
  c->next_id = 1;
  return c;
}

/* core.connect(opts) -> conn | nil, msg, errname */
static int core_connect(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_pushboolean(L, 1);
  lua_setfield(L, 1, "stdin");
  lua_pushliteral(L, "lines");
  lua_setfield(L, 1, "stdout");
  lua_pushboolean(L, 1);
  lua_setfield(L, 1, "process_group");
  conn *c = new_conn(L, 1);   /* at 2 */
  int fault_ref = ref_callback(L, 1, "on_fault"), eof_ref = ref_callback(L, 1, "on_eof");
  int notify_ref = ref_callback(L, 1, "notify");
  lua_pushcfunction(L, process_spawn);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 3);
  if (lua_isnil(L, -3)) {
    int refs[] = {fault_ref, eof_ref, notify_ref};
    for (int i = 0; i < 3; i++) unref(&refs[i]);
    return 3;
  }
  lua_pop(L, 2);
  c->proc = process_of(L, -1);
  c->box_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  c->fault_ref = fault_ref;
  c->eof_ref = eof_ref;
  c->notify_ref = notify_ref;
  c->pending_ref = new_table_ref(L);
  c->abandoned_ref = new_table_ref(L);
  c->free_ref = new_table_ref(L);
  c->infix_ref = new_table_ref(L);
  c->state = CONN_RUNNING;
  process_sink_stdout(c->proc, (line_sink){on_stdout, c, on_frame});
  lua_settop(L, 2);
  return 1;
}

static int conn_gc(lua_State *L) {
  release(L, to_conn(L));
  return 0;
}

/* data_base64 of a long line's output event, made from its data when read. */
static int output_event_index(lua_State *L) {
  const char *key = lua_tostring(L, 2);
  if (key == NULL || strcmp(key, "data_base64") != 0) return 0;
  lua_getfield(L, 1, "data");
  size_t n;
  const char *bytes = lua_tolstring(L, -1, &n);
  if (bytes == NULL) return 0;
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "smol.core");
  lua_getfield(L, -1, "b64encode");
  lua_pushvalue(L, -4);
  lua_call(L, 1, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, 1, "data_base64");
  return 1;
}

void conn_open(lua_State *L) {
  json_arena_use(&host_get()->json_arena);
  static const luaL_Reg methods[] = {
    {"pid", conn_pid}, {"send", conn_send}, {"take", conn_take}, {"fail", conn_fail},
    {"fail_pending", conn_fail_pending}, {"abandon", conn_abandon},
    {"stop", conn_stop}, {"observe", conn_observe}, {"close_stdin", conn_close_stdin},
    {"kill", conn_kill}, {"pending_count", conn_pending_count}, {"close", conn_close},
    {NULL, NULL}};
  static const luaL_Reg meta[] = {
    {"__gc", conn_gc}, {"__close", conn_gc}, {"__tostring", conn_tostring}, {NULL, NULL}};
  luaL_newmetatable(L, CONN_MT);
  lua_pushvalue(L, -1);
  luaL_setfuncs(L, meta, 1);   /* each with the metatable as its upvalue (see to_conn) */
  lua_newtable(L);
  lua_pushvalue(L, -2);
  luaL_setfuncs(L, methods, 1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_newmetatable(L, OUTPUT_EVENT_MT);
  lua_pushcfunction(L, output_event_index);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_pushcfunction(L, core_connect);
  lua_setfield(L, -2, "connect");
  lua_pushcfunction(L, core_has_reply);
  lua_setfield(L, -2, "has_reply");
}
