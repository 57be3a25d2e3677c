/*
** Why an idle relay runs as SCHED_BATCH (see relay_sched.h). A normal task
** woken by a pipe write preempts the writer at once. So when the host
** wrote an exec request, the provider preempted it before it reached
** epoll_wait and forked while the host was still runnable on that CPU; the
** kernel then put the command on the other, idle, CPU, and the exec paid
** that vCPU's wake-up (80-150 µs on a 2-vCPU VM, `perf sched timehist`)
** and a cross-CPU wake-up of the provider at the exit. A SCHED_BATCH task
** does not preempt on wake-up: the host finishes its few µs and sleeps,
** and the provider forks on a CPU of its own. Measured side by side with
** the build before (alternating batches of 50 in one host, 4 runs,
** unpinned): sb:exec of /bin/true went from 1.13-1.21x the plain
** posix_spawn loop to 1.04-1.15x (median per exec ~70-110 µs less).
**
** Only while idle: running as SCHED_BATCH all the time also kept the
** provider from preempting its running commands to take their exits and
** start the next ones, and 16 execs in flight dropped from ~1300-1600 to
** ~900 execs/s with the CPUs 55% busy instead of 84%
** (bench/provider_bench.sh). In a bubblewrap session the helper forks and
** reaps, so only the helper switches; the provider, between host and
** helper, stays SCHED_BATCH. Counting those commands in the provider too
** made it preempt the helper when the helper reported an exit, so when it
** then woke the host, two tasks were runnable on its CPU and the host was
** woken on the idle one: sequential bwrap execs measured 1.23-1.31x the
** plain loop unpinned, and 1.11-1.14x without (16 in flight unchanged,
** ~1100 execs/s). The policy has no priority either way; each switch is
** one system call.
*/
#define _GNU_SOURCE
#include "relay_sched.h"

#include <sched.h>

static void set_batch(relay_sched *r, bool on) {
  struct sched_param none = {0};
  if (sched_setscheduler(0, on ? SCHED_BATCH : SCHED_OTHER, &none) == 0) r->batch_now = on;
}

void relay_sched_enter(relay_sched *r) {
  r->managed = sched_getscheduler(0) == SCHED_OTHER;
  if (r->managed && r->running == 0) set_batch(r, true);
}

void relay_sched_busy(relay_sched *r) {
  if (r->running++ == 0 && r->managed) set_batch(r, false);
}

void relay_sched_idle(relay_sched *r) {
  if (r->running > 0 && --r->running == 0 && r->managed) set_batch(r, true);
}

void relay_sched_child(const relay_sched *r) {
  struct sched_param none = {0};
  if (r->batch_now) sched_setscheduler(0, SCHED_OTHER, &none);
}
