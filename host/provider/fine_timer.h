/*
** A one-shot timer finer than libuv's: libuv rounds its timers to whole
** milliseconds, and a pause in reading a fast pipe must be a fraction of
** one (process.c, resting). Built on a timerfd watched by the loop; the
** caller owns the struct (zeroed: closed), the module keeps no state.
*/
#ifndef SMOL_FINE_TIMER_H
#define SMOL_FINE_TIMER_H

#include <stdbool.h>
#include <uv.h>

typedef struct fine_timer fine_timer;
typedef void (*fine_timer_cb)(fine_timer *t);

struct fine_timer {
  uv_poll_t watch;
  int fd;                  /* the timerfd, while open */
  bool open;
  bool closing;            /* uv_close has not called back yet: the struct is still the loop's */
  fine_timer_cb cb;
};

/*
** Calls cb once, us microseconds from now, unless already armed (the
** earlier deadline stands). Opens the timerfd at first use. 0, or -1 when
** no timer could be made, or it is still closing (the caller then goes
** without).
*/
int fine_timer_start(fine_timer *t, uv_loop_t *loop, unsigned long us, fine_timer_cb cb);

/* Disarms and closes it; start opens it again. */
void fine_timer_close(fine_timer *t);

#endif
