/*
** `describe` (the `describe` extension): the provider, its version and
** every profile it knows, with what a session of each would enforce here.
*/
#ifndef SMOL_DESCRIBE_H
#define SMOL_DESCRIBE_H

#include <cjson/cJSON.h>

#include "reply.h"

void method_describe(request *r, const cJSON *params);

#endif
