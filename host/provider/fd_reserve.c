/*
** The descriptor reserve (see fd_reserve.h).
*/
#include "fd_reserve.h"

#include <fcntl.h>
#include <unistd.h>

#include "context.h"

void fd_reserve_restore(void) {
  provider *ctx = provider_ctx();
  unsigned want = sizeof ctx->spare_fds / sizeof ctx->spare_fds[0];
  while (ctx->nspare < want) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ctx->spare_fds[ctx->nspare++] = fd;
  }
}

void fd_reserve_release(void) {
  provider *ctx = provider_ctx();
  while (ctx->nspare > 0) close(ctx->spare_fds[--ctx->nspare]);
}
