/*
** Duplicate keys in a parsed JSON value. cJSON keeps every member of an
** object and its lookups find the first; other decoders (lua-cjson, most
** languages') keep the last. A message with a key twice could mean one
** thing to its writer and another to its reader, so both ends of the
** wire refuse it.
*/
#ifndef SMOL_JSON_KEYS_H
#define SMOL_JSON_KEYS_H

#include <cjson/cJSON.h>

/* The first key that occurs twice in one object of v (at any depth), or NULL. */
const char *json_duplicate_key(const cJSON *v);

#endif
