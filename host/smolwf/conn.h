/*
** A provider connection (metatable "smol.conn"): the whole contract
** between the host's C and smol.jsonl. The connection owns its provider
** process and everything about the wire (docs/protocol.md, "Transport"):
** it writes request lines, reads reply lines, decodes them, checks their
** envelope and routes each to the reply queue of its request. smol.jsonl
** keeps what results and errors mean, timeouts and the provider's end.
**
**   conn | nil, msg, errname = core.connect(opts)
**       opts: core.spawn's file, args, env, cwd, max_line, on_stderr and
**       on_exit (stdin, stdout and process_group are the connection's), and
**         max_depth   JSON nesting cap of a reply line
**         on_fault    fn(why): the provider broke the protocol; why reads
**                     after "provider `P` ", e.g. "sent a line that is not
**                     valid JSON (at byte 3 of 9)". The connection has
**                     stopped reading replies by then.
**         on_eof      fn(): the provider closed its stdout
**         notify      fn(rq): a reply came for a request whose queue has
**                     waiters (rq.waiters set: smol.task's wait_until)
**   rq | nil, why = conn:send(method, params_json [, capture, limit, argv, quiet])
**       writes {"id":N,"method":M,"params":P} and returns the request's
**       reply queue (a table to wait on; its contents are the
**       connection's). With capture, a process request (exec, wait): its
**       result is the one smol.sandbox returns (exec_result.c), made
**       where the result line is decoded; capture says where its output
**       comes from: "events" (kept from its output events, the first
**       limit bytes of each stream), "copy" (the result's own base64
**       copy, cut at limit) or "none"; argv goes into the result. quiet:
**       its well-formed started, exited, dropped and output events stay
**       out of the queue (the caller wants none).
**   kind, body = conn:take(rq)  the next reply: "event", "result", "error",
**                               "protocol" (a process request's result
**                               that makes no sense; body: why) or
**                               "failure" (body: what conn:fail gave);
**                               nil when none has come yet. After a
**                               result, error or protocol the request has
**                               ended, and its queue is reused by later
**                               requests
**   core.has_reply(rq)          true when take has something
**   conn:fail(rq, err)          queues the failure err (a deadline passed)
**   conn:fail_pending(err)      fails every request in flight with err
**   pid = conn:abandon(rq, on_late)   the waiter gave up: later replies of
**                               the request are dropped; on_late(msg), if
**                               given, gets its terminal one as
**                               {result = ...} or {error = ...}
**   conn:stop()                 no more requests; replies are ignored
**   conn:observe(fn | nil)      fn(direction, line) for every line sent
**                               ("send") and received ("recv"), before it
**                               is decoded: the path is the same with it
**   conn:close_stdin(), conn:kill(sig), conn:pid(), conn:pending_count()
**
** Output events (and the archive extension's `chunk` events) come with
** their payload decoded: `data` holds the bytes
** (data_base64 is made from them only when read); an event whose
** data_base64 is not valid base64 keeps it as it came, for the client to
** reject.
**
** For a harness without a pipe (a fuzzer of the reply path):
** conn_feed_line(L, c, line, len) routes one reply line exactly as the
** reader's sink does (decode, envelope, route, quiet requests); the line
** must be writable (a long payload is decoded over itself). When it
** returns N > 0 the line began an output frame: the N bytes after it go
** to conn_feed_frame(L, c, data, N), not to conn_feed_line.
*/
#ifndef SMOLWF_CONN_H
#define SMOLWF_CONN_H

#include <stddef.h>

#include <lua.h>

void conn_open(lua_State *L);   /* core.connect, core.has_reply */

typedef struct conn conn;
conn *conn_check(lua_State *L, int idx);                        /* the smol.conn at idx (misuse raises) */
/* One reply line, as read; returns how many bytes after it are a frame's payload, for conn_feed_frame. */
size_t conn_feed_line(lua_State *L, conn *c, char *line, size_t len);
void conn_feed_frame(lua_State *L, conn *c, char *data, size_t n);   /* that payload, whole */

#ifdef SMOLWF_FUZZ
/* The fuzz build only (fuzz/host_reply.c): once nothing is pending (else -1), the connection runs again and counts ids from 1. */
int conn_fuzz_restart(conn *c);
#endif

#endif
