/*
** `remove` of a directory on a job (job.h): a tree of 100k files takes a
** second or more to remove, and every other request, of this session or
** another, is served meanwhile (a file or a link is one unlink, done at
** once). The reply comes once the tree is gone (or says what
** kept it). While the job runs it holds the session's files
** (session_hold, discard.h): a close that comes meanwhile ends the
** session's commands at once and is answered after the remove.
*/
#ifndef SMOL_REMOVING_H
#define SMOL_REMOVING_H

#include <cjson/cJSON.h>

#include "reply.h"
#include "session.h"

void method_remove(request *r, session *s, const cJSON *params);

/* Waits until every remove in flight has ended and been answered (the provider is stopping). */
void removes_finish(void);

#endif
