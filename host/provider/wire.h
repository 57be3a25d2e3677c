/*
** The wire: the provider's stdin and stdout, as JSON Lines (framing and
** limits: docs/protocol.md). Complete request lines go to the line hook;
** reply lines are queued whole and leave before the loop next waits (or
** when wire_flush asks), the lines queued until then in one writev.
**
** Backpressure: when the host reads slowly and the bytes queued pass
** WIRE_QUEUE_HIGH, the wire stops reading stdin and tells the congestion
** hook, so producers (a command's output) can pause; once the queue is
** below WIRE_QUEUE_LOW it reads again and tells the hook again. The wire
** knows nothing of requests, sessions or processes.
*/
#ifndef SMOL_WIRE_H
#define SMOL_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* A request line may carry a whole write_file payload; longer is a mistake. */
#define WIRE_MAX_LINE (256u * 1024 * 1024)
/* Output queue marks: congested above HIGH, relieved below LOW. */
#define WIRE_QUEUE_HIGH (8u * 1024 * 1024)
#define WIRE_QUEUE_LOW (2u * 1024 * 1024)

/* Why the input ended. */
typedef enum wire_end {
  WIRE_EOF,               /* end of input after a complete line */
  WIRE_EOF_MID_LINE,      /* end of input in the middle of a line */
  WIRE_LINE_TOO_LONG,     /* a line passed WIRE_MAX_LINE: the stream cannot be followed */
  WIRE_READ_FAILED,
  WIRE_WRITE_FAILED,      /* the host is gone: nobody reads another line */
} wire_end;

typedef struct wire_hooks {
  /* One line, without its '\n' (line[len] == '\0'); the bytes live for the call only. */
  void (*line)(char *line, size_t len);
  /* Input ended, or output failed: called once; nothing more is read. */
  void (*end)(wire_end why);
  /* The output queue passed its high mark (true), or drained below its low mark (false). */
  void (*congested)(bool on);
} wire_hooks;

/* Starts reading stdin on loop. 0, or -1 with a message on stderr. */
int wire_start(uv_loop_t *loop, const wire_hooks *hooks);

/* Queues one complete line (malloc'ed, ends in '\n'), taking it over. */
void wire_send(char *line, size_t len);

/*
** Whether wire_send_spliced can move bytes to stdout without a copy:
** stdout is a pipe that takes splice(2) and the wire still writes.
*/
bool wire_can_splice(void);

/*
** Sends line (malloc'ed, taken over), then n bytes that fd, a pipe
** holding at least n that nobody else reads, gives up: moved to stdout
** by splice(2) when nothing is queued before them and stdout has room,
** else read from fd and queued like any line. Either way the n bytes
** are consumed, and follow the line with nothing between.
*/
void wire_send_spliced(char *line, size_t len, int fd, size_t n);

/*
** Writes the lines queued this turn now rather than before the loop next
** waits; what the pipe cannot take is queued as usual.
*/
void wire_flush(void);

/* Stops reading stdin for good (the hooks get no more lines). */
void wire_stop_reading(void);

/*
** Closes stdout once every queued line is written, or at once when
** abandon is set (stopping on a signal: the host may never read them).
*/
void wire_finish(bool abandon);

/* Frees what the wire holds, after the loop has ended. */
void wire_free(void);

#endif
