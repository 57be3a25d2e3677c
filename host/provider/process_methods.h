/*
** The process methods: exec, spawn (part 1), wait, kill, write_stdin (the
** `process` extension), with the options of the `timeout` and
** `output_limit` extensions (docs/protocol.md). Each reads its request's
** fields and hands the work to process.h; each answers its request
** exactly once, now or later.
*/
#ifndef SMOL_PROCESS_METHODS_H
#define SMOL_PROCESS_METHODS_H

#include <cjson/cJSON.h>

#include "reply.h"
#include "session.h"

void method_exec(request *r, session *s, const cJSON *params);
void method_spawn(request *r, session *s, const cJSON *params);
void method_wait(request *r, session *s, const cJSON *params);
void method_kill(request *r, session *s, const cJSON *params);
void method_write_stdin(request *r, session *s, const cJSON *params);

#endif
