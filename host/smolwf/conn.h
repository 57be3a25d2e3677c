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
**   rq | nil, why = conn:send(method, params_json [, quiet])
**       writes {"id":N,"method":M,"params":P} and returns the request's
**       reply queue (a table to wait on; its contents are the
**       connection's). quiet, for a process request (exec, spawn, wait)
**       whose caller wants no events: true keeps its well-formed started,
**       exited, dropped and output events out of the queue; an integer N
**       also keeps the first N bytes of each output stream (see take).
**   kind, body = conn:take(rq)  the next reply: "event", "result", "error"
**                               or "failure" (body: what conn:fail gave);
**                               nil when none has come yet. After "result"
**                               or "error" the request has ended: take also
**                               returns its process_id (a quiet request's
**                               `started`) and its kept output as
**                               core.capture values (or nil), and the
**                               queue is reused by later requests
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
*/
#ifndef SMOLWF_CONN_H
#define SMOLWF_CONN_H

#include <lua.h>

void conn_open(lua_State *L);   /* core.connect, core.has_reply */

#endif
