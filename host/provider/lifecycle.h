/*
** A session's life: `open` (a profile, a private directory, the
** workspace copied in, a backend, a cwd) and `close` (its processes
** killed and their requests answered, its backend ended, its files
** removed); and closing every session when the provider stops.
*/
#ifndef SMOL_LIFECYCLE_H
#define SMOL_LIFECYCLE_H

#include <cjson/cJSON.h>

#include "reply.h"

void method_open(request *r, const cJSON *params);
void method_close(request *r, const cJSON *params);

/* Closes every open session and removes the provider's root directory. */
void sessions_close_all(void);

#endif
