/*
** The method table: a request's method name to its handler (every
** method of docs/protocol.md but `shutdown`, which is the server's).
** Methods that work on a session get it looked up here from
** params.session, so each of their handlers starts with a live session.
*/
#ifndef SMOL_METHODS_H
#define SMOL_METHODS_H

#include <cjson/cJSON.h>

#include "reply.h"

/* Runs the handler of r->method with params (NULL when the request has none); unknown ones get unknown_method. */
void methods_dispatch(request *r, const cJSON *params);

#endif
