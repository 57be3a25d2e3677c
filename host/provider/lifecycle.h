/*
** A session's end: `close` (its processes killed and their requests
** answered, its backend ended, its files removed); and closing every
** session, opening ones too, when the provider stops. Opening is
** opening.h's.
*/
#ifndef SMOL_LIFECYCLE_H
#define SMOL_LIFECYCLE_H

#include <cjson/cJSON.h>

#include "reply.h"

void method_close(request *r, const cJSON *params);

/* Closes every open session, opening ones too; the provider's root directory stays (a harness reuses it). */
void sessions_close_every(void);

/* Closes every open session and removes the provider's root directory. */
void sessions_close_all(void);

#endif
