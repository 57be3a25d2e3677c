/*
** A session's capabilities (see capabilities.h).
*/
#include "capabilities.h"

#include <string.h>

/* The extensions every session of this provider serves. */
static const char *const extensions[] = {
  "exec", "process", "timeout", "signal", "output_limit", "fs_extra", "describe", "raw_names", "fork",
  "archive", "session_by_id", "raw_output",
};

cJSON *capabilities_of(const session *s) {
  cJSON *caps = cJSON_CreateObject();
  for (size_t i = 0; i < sizeof extensions / sizeof extensions[0]; i++) cJSON_AddTrueToObject(caps, extensions[i]);
  cJSON_AddStringToObject(caps, "isolation", s->backend->isolation);
  /* Without namespaces nothing stops a command from reaching the network. */
  bool network = strcmp(s->backend->isolation, "none") == 0 || s->profile->network;
  cJSON_AddBoolToObject(caps, "network", network);
  /* How the workspace was made (session.h): what open cost and what writes reach. */
  cJSON_AddStringToObject(caps, "workspace", s->ws.mechanism ? s->ws.mechanism : "empty");
  return caps;
}
