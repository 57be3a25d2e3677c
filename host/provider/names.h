/*
** File names on the wire. JSON text is UTF-8, and a file name is any
** bytes but '/' and NUL, so a name that is not UTF-8 travels twice: in
** `name` made valid (each byte that is no UTF-8 becomes U+FFFD, for
** people) and exactly in `name_base64` (for programs). A request names
** such a file the same way: `path_base64` in place of `path`
** (docs/protocol.md, file names).
*/
#ifndef SMOL_NAMES_H
#define SMOL_NAMES_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "failure.h"

/* Adds name to obj as field, and as field_base64 too when it is not UTF-8. */
void names_add(cJSON *obj, const char *field, const char *name);

/*
** Reads field, or else field_base64 (decoded, no NUL allowed) into *out,
** which the caller frees. One of them is required.
*/
bool names_param(const cJSON *params, const char *field, char **out, failure *f);

#endif
