/*
** The file methods: create_dir_all, write_file, read_file,
** create_temp_dir (part 1) and stat, list_dir, ranged reads, appends and
** modes (the `fs_extra` extension; docs/protocol.md). Each answers its
** request before it returns. `remove` is removing.h's.
*/
#ifndef SMOL_FILEOPS_H
#define SMOL_FILEOPS_H

#include <cjson/cJSON.h>

#include "reply.h"
#include "session.h"

void method_create_dir_all(request *r, session *s, const cJSON *params);
void method_write_file(request *r, session *s, const cJSON *params);
void method_read_file(request *r, session *s, const cJSON *params);
void method_create_temp_dir(request *r, session *s, const cJSON *params);
void method_stat(request *r, session *s, const cJSON *params);
void method_list_dir(request *r, session *s, const cJSON *params);

#endif
