/*
** describe (see describe.h).
*/
#include "describe.h"

#include <stdbool.h>

#include "bwrap_probe.h"
#include "profile.h"

/* What a session of p would enforce here: an automatic profile says what it would pick. */
static bool enforces_namespaces(const profile *p) {
  return p->isolation == ISOLATION_NAMESPACES || (p->automatic && bwrap_usable(NULL));
}

static void describe_now(void *data) {
  request *r = data;
  if (bwrap_probe_cancelled()) {   /* killed, not failed: saying "isolation: none" would be untrue */
    reply_error(r, "internal", "describe: cancelled: the provider stopped before it knew whether bubblewrap works here");
    return;
  }
  size_t n;
  const profile *all = profiles_all(&n);
  cJSON *list = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", all[i].name);
    bool namespaces = enforces_namespaces(&all[i]);
    cJSON_AddStringToObject(p, "isolation", namespaces ? "namespaces" : "none");
    cJSON_AddBoolToObject(p, "network", all[i].network || !namespaces);
    cJSON_AddItemToArray(list, p);
  }
  cJSON *result = cJSON_CreateObject();
  cJSON_AddStringToObject(result, "provider", "smolwf-provider");
  cJSON_AddStringToObject(result, "version", SMOLWF_VERSION);
  cJSON_AddItemToObject(result, "profiles", list);
  cJSON_AddNumberToObject(result, "protocol", 1);
  reply_result(r, result);
}

/* What bwrap profiles enforce here is the probe's answer: the first describe waits for it, off the loop. */
void method_describe(request *r, const cJSON *params) {
  (void)params;
  bwrap_probe_then(describe_now, r);
}
