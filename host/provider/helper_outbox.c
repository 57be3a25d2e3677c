/*
** A control channel that never blocks the loop (see helper_outbox.h).
*/
#define _GNU_SOURCE
#include "helper_outbox.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox_helper.h"

/* A message waiting for room, with its own copies of the fds it carries. */
typedef struct queued {
  void *msg;
  size_t len;
  int fds[3];
  int nfds;
  struct queued *next;
} queued;

struct helper_outbox {
  int fd;
  uv_poll_t writable;      /* watched while messages wait */
  uv_timer_t deadline;     /* runs while messages wait; restarted whenever one goes */
  bool watching;
  bool closed;
  unsigned handles_open;
  int deadline_ms;
  outbox_broken_fn broken;
  void *data;
  queued *first, **last;
  size_t waiting;
};

/* One sendmsg, never waiting: 0, or -errno (-EAGAIN: no room now). */
static int send_now(int sock, const void *msg, size_t len, const int *fds, int nfds) {
  return helper_send(sock, msg, len, fds, nfds, MSG_DONTWAIT);
}

static void free_queued(queued *q) {
  for (int i = 0; i < q->nfds; i++) close(q->fds[i]);
  free(q->msg);
  free(q);
}

static void drop_all(helper_outbox *o) {
  while (o->first) {
    queued *q = o->first;
    o->first = q->next;
    free_queued(q);
  }
  o->last = &o->first;
  o->waiting = 0;
}

static void stop_waiting(helper_outbox *o) {
  if (!o->watching) return;
  o->watching = false;
  uv_poll_stop(&o->writable);
  uv_timer_stop(&o->deadline);
}

/* The channel is done for: nothing more goes out; the owner hears why. */
static void break_channel(helper_outbox *o, int err) {
  stop_waiting(o);
  drop_all(o);
  o->closed = true;
  o->broken(o->data, err);
}

static void on_deadline(uv_timer_t *t) {
  break_channel(t->data, -ETIMEDOUT);
}

/* Sends what waits, oldest first, until the socket is full again. */
static void on_writable(uv_poll_t *h, int status, int events) {
  (void)events;
  helper_outbox *o = h->data;
  int rc = status < 0 ? status : 0;
  bool sent = false;
  while (rc == 0 && o->first) {
    queued *q = o->first;
    rc = send_now(o->fd, q->msg, q->len, q->fds, q->nfds);
    if (rc < 0) break;
    o->first = q->next;
    if (!o->first) o->last = &o->first;
    o->waiting--;
    free_queued(q);
    sent = true;
  }
  if (rc < 0 && rc != -EAGAIN) { break_channel(o, rc); return; }
  if (!o->first) stop_waiting(o);
  else if (sent) uv_timer_again(&o->deadline);   /* it moves: the deadline counts from the last message taken */
}

static void start_waiting(helper_outbox *o) {
  if (o->watching) return;
  o->watching = true;
  uv_poll_start(&o->writable, UV_WRITABLE, on_writable);
  uv_timer_start(&o->deadline, on_deadline, (uint64_t)o->deadline_ms, (uint64_t)o->deadline_ms);
}

/* A copy of msg and its fds, at the end of the queue. -errno when the fds cannot be copied. */
static int enqueue(helper_outbox *o, const void *msg, size_t len, const int *fds, int nfds) {
  queued *q = calloc(1, sizeof *q);
  if (!q) abort();
  for (; q->nfds < nfds; q->nfds++) {
    q->fds[q->nfds] = fcntl(fds[q->nfds], F_DUPFD_CLOEXEC, 0);
    if (q->fds[q->nfds] < 0) {
      int err = -errno;
      free_queued(q);
      return err;
    }
  }
  q->msg = malloc(len ? len : 1);
  if (!q->msg) abort();
  memcpy(q->msg, msg, len);
  q->len = len;
  *o->last = q;
  o->last = &q->next;
  o->waiting++;
  start_waiting(o);
  return 0;
}

helper_outbox *outbox_new(uv_loop_t *loop, int fd, int deadline_ms, outbox_broken_fn broken, void *data) {
  helper_outbox *o = calloc(1, sizeof *o);
  if (!o) abort();
  *o = (helper_outbox){.fd = fd, .deadline_ms = deadline_ms, .broken = broken, .data = data};
  o->last = &o->first;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  uv_poll_init(loop, &o->writable, fd);
  o->writable.data = o;
  uv_timer_init(loop, &o->deadline);
  o->deadline.data = o;
  o->handles_open = 2;
  return o;
}

int outbox_send(helper_outbox *o, const void *msg, size_t len, const int *fds, int nfds) {
  if (o->closed) return -EPIPE;
  if (o->first) return enqueue(o, msg, len, fds, nfds);   /* behind what waits: the order is the protocol's */
  int rc = send_now(o->fd, msg, len, fds, nfds);
  if (rc == -EAGAIN) return enqueue(o, msg, len, fds, nfds);
  if (rc < 0) o->closed = true;   /* the caller hears it now, not through `broken` */
  return rc;
}

size_t outbox_waiting(const helper_outbox *o) {
  return o->waiting;
}

static void free_outbox(uv_handle_t *h) {
  helper_outbox *o = h->data;
  if (--o->handles_open == 0) free(o);
}

void outbox_close(helper_outbox *o) {
  stop_waiting(o);
  drop_all(o);
  o->closed = true;
  uv_close((uv_handle_t *)&o->writable, free_outbox);
  uv_close((uv_handle_t *)&o->deadline, free_outbox);
}
