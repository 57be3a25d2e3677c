/*
** What both ends of the wire check in a JSON line beyond what cJSON does,
** where a lenient reading would change what the line means.
**   - Duplicate keys: cJSON keeps every member of an object and its
**     lookups find the first; other decoders (lua-cjson, most languages')
**     keep the last.
**   - \u0000 in a string: cJSON's strings end at the NUL, so "a\u0000b"
**     reads as "a".
*/
#ifndef SMOL_JSON_RULES_H
#define SMOL_JSON_RULES_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* The first key that occurs twice in one object of v (at any depth), or NULL. */
const char *json_duplicate_key(const cJSON *v);

/*
** How many \u0000 escapes the strings of the len bytes at line hold;
** fn(line, at), when not NULL, is called for each (at: the offset of its
** 'u'). The line is JSON text: outside strings a backslash cannot occur.
*/
size_t json_each_nul_escape(char *line, size_t len, void (*fn)(char *line, size_t at));

#endif
