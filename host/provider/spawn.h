/*
** Starting one command: the single place that turns a request into a
** running process. Used by the local backend directly and by the helper
** that runs inside a bubblewrap session, so both behave the same (process
** group, environment, limits, exit code 127 for a missing program).
*/
#ifndef SMOL_SPAWN_H
#define SMOL_SPAWN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "relay_sched.h"

/* Per-command resource limits; RLIM_INFINITY (or 0 for disk) means unset. */
typedef struct limits {
  rlim_t cpu_seconds;     /* RLIMIT_CPU */
  rlim_t address_space;   /* RLIMIT_AS, bytes */
  rlim_t open_files;      /* RLIMIT_NOFILE */
  rlim_t processes;       /* RLIMIT_NPROC */
  rlim_t file_size;       /* RLIMIT_FSIZE, bytes */
  uint64_t disk_bytes;    /* session's total disk use; 0 = no cap */
  uint64_t disk_inodes;   /* session's total inodes; 0 = no cap */
} limits;

typedef struct spawn_spec {
  char *const *argv;      /* argv[0] is looked up in envp's PATH */
  char *const *envp;      /* the command's whole environment */
  const char *cwd;
  int fd_in, fd_out, fd_err;   /* become 0, 1, 2 in the child; -1: /dev/null */
  const limits *limits;   /* NULL: none */
} spawn_spec;

/*
** What every start needs from the program that starts commands (the
** provider, or the helper in a bubblewrap session), read once at its
** first start (spawn.c says why): the signals it handles or ignores,
** which the child resets, its pid, and its scheduling policy.
*/
typedef struct spawn_setup {
  bool ready;
  int non_default[NSIG];
  int n_non_default;
  pid_t parent;
  const relay_sched *sched;   /* the child leaves SCHED_BATCH when its parent is in it */
} spawn_setup;

/* A setup read at the first spawn_start, for a program whose policy is *sched. */
void spawn_setup_init(spawn_setup *setup, const relay_sched *sched);

/*
** Starts the command as the leader of a new process group (pgid == pid).
** Returns the pid, or -errno when no process could be made. A program that
** cannot be found or executed is not an error here: the child writes one
** line naming it to fd_err and exits 127 (126 when found but not executable).
*/
pid_t spawn_start(spawn_setup *setup, const spawn_spec *spec);

/* Sets every field of l to "unset". */
void limits_init(limits *l);

#endif
