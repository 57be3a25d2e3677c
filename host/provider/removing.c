/*
** Removes on jobs (see removing.h).
*/
#define _GNU_SOURCE
#include "removing.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context.h"
#include "discard.h"
#include "job.h"
#include "paths.h"
#include "tree.h"

typedef struct removing {
  request *r;
  session *s;               /* held until the job is done */
  int dirfd;                /* the directory that holds the tree (O_PATH), ours */
  char *name;               /* the tree's name in it */
  char *given;              /* the path as the request wrote it, for the error */
  int err;                  /* 0, or the errno that kept it */
  job *job;
  struct removing *next;
} removing;

/* The removes in flight (the context's part). */
typedef struct removes {
  removing *first;
} removes;

static removes *table(void) {
  return CTX_PART(removes);
}

/* On the job's thread: a remove is never cut short, so it ignores the cancel flag. */
static void remove_work(job *j) {
  removing *rm = j->data;
  rm->err = -tree_remove(rm->dirfd, rm->name);
}

static void unlink_removing(removing *rm) {
  for (removing **pp = &table()->first; *pp; pp = &(*pp)->next)
    if (*pp == rm) { *pp = rm->next; return; }
}

static void answer(request *r, int err, const char *given) {
  if (!err) { reply_result(r, cJSON_CreateObject()); return; }
  failure f;
  fail_errno(&f, err, r->method, given);
  reply_failure(r, &f);
}

static void removed(job *j) {
  removing *rm = j->data;
  unlink_removing(rm);
  close(rm->dirfd);
  answer(rm->r, rm->err, rm->given);
  session_release(rm->s);   /* after the answer: a close waiting for it answers after this one */
  free(rm->name);
  free(rm->given);
  free(rm);
}

/* Starts removing name in dirfd (both taken over); false when no thread could be had. */
static bool start(request *r, session *s, int dirfd, const char *name, const char *given) {
  removing *rm = calloc(1, sizeof *rm);
  if (!rm) abort();
  *rm = (removing){.r = r, .s = s, .dirfd = dirfd, .name = strdup(name), .given = strdup(given)};
  rm->job = job_start(provider_ctx()->loop, remove_work, removed, rm);
  if (!rm->job) { free(rm->name); free(rm->given); free(rm); return false; }
  session_hold(s);
  rm->next = table()->first;
  table()->first = rm;
  return true;
}

void method_remove(request *r, session *s, const cJSON *params) {
  resolved p;
  failure f;
  if (!path_param(s, r->method, params, &p, &f)) { reply_failure(r, &f); return; }
  const char *name;
  int dirfd = path_open_parent(&p, &name);
  if (dirfd >= 0 && !name) {
    close(dirfd);
    reply_error(r, "permission_denied", "remove `%s`: a session area itself cannot be removed", p.given);
    return;
  }
  struct stat st;
  int err = dirfd < 0 ? -dirfd : fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? errno : 0;
  if (!err && S_ISDIR(st.st_mode) && start(r, s, dirfd, name, p.given)) return;
  /* Missing, one file (one unlink), or no thread to be had: here and now. */
  if (!err) err = -tree_remove(dirfd, name);
  if (dirfd >= 0) close(dirfd);
  answer(r, err, p.given);
}

void removes_finish(void) {
  while (table()->first) job_finish_now(table()->first->job);
  free(provider_ctx()->removes);
  provider_ctx()->removes = NULL;
}
