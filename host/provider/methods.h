/*
** The protocol's methods, one handler each. A handler answers its request
** exactly once (reply_* in server.h), before returning or later.
** Handlers with a session get it already looked up from params.session.
*/
#ifndef SMOL_METHODS_H
#define SMOL_METHODS_H

#include <cjson/cJSON.h>
#include "server.h"
#include "session.h"

/* session.c */
void method_open(request *r, const cJSON *params);
void method_close(request *r, const cJSON *params);
void method_shutdown(request *r, const cJSON *params);
void method_describe(request *r, const cJSON *params);

/* fileops.c */
void method_create_dir_all(request *r, session *s, const cJSON *params);
void method_write_file(request *r, session *s, const cJSON *params);
void method_read_file(request *r, session *s, const cJSON *params);
void method_remove(request *r, session *s, const cJSON *params);
void method_create_temp_dir(request *r, session *s, const cJSON *params);
void method_stat(request *r, session *s, const cJSON *params);
void method_list_dir(request *r, session *s, const cJSON *params);

/* process.c */
void method_exec(request *r, session *s, const cJSON *params);
void method_spawn(request *r, session *s, const cJSON *params);
void method_wait(request *r, session *s, const cJSON *params);
void method_kill(request *r, session *s, const cJSON *params);
void method_write_stdin(request *r, session *s, const cJSON *params);

/* Runs the handler for r->method with params (dispatch.c). */
void dispatch(request *r, const cJSON *params);

#endif
