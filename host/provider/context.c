/*
** The provider's one context (see context.h).
*/
#include "context.h"

#include <stdlib.h>

static provider the_provider;

provider *provider_ctx(void) {
  return &the_provider;
}

void *ctx_alloc(size_t size) {
  void *p = calloc(1, size);
  if (!p) abort();
  return p;
}
