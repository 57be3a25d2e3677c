/*
** The fine timer (see fine_timer.h).
*/
#define _GNU_SOURCE
#include "fine_timer.h"

#include <stdint.h>
#include <sys/timerfd.h>
#include <unistd.h>

static void on_expired(uv_poll_t *w, int status, int events) {
  (void)status; (void)events;
  fine_timer *t = w->data;
  uint64_t expirations;
  if (read(t->fd, &expirations, sizeof expirations) < 0) { /* EAGAIN: nothing to clear */ }
  uv_poll_stop(&t->watch);   /* no longer active: armed no more */
  t->cb(t);
}

static int open_timer(fine_timer *t, uv_loop_t *loop) {
  t->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (t->fd < 0) return -1;
  if (uv_poll_init(loop, &t->watch, t->fd) < 0) {
    close(t->fd);
    return -1;
  }
  t->watch.data = t;
  t->open = true;
  return 0;
}

int fine_timer_start(fine_timer *t, uv_loop_t *loop, unsigned long us, fine_timer_cb cb) {
  if (t->open && uv_is_active((uv_handle_t *)&t->watch)) return 0;   /* armed */
  if (t->closing) return -1;
  if (!t->open && open_timer(t, loop) < 0) return -1;
  struct itimerspec when = {.it_value = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000}};
  if (timerfd_settime(t->fd, 0, &when, NULL) < 0) return -1;
  t->cb = cb;
  uv_poll_start(&t->watch, UV_READABLE, on_expired);
  return 0;
}

static void on_closed(uv_handle_t *h) {
  fine_timer *t = h->data;
  t->closing = false;
}

void fine_timer_close(fine_timer *t) {
  if (!t->open) return;
  t->open = false;
  t->closing = true;
  uv_close((uv_handle_t *)&t->watch, on_closed);
  /* uv_close stops the watch at once: the descriptor may go now */
  close(t->fd);
}
