/*
** The descriptor reserve (see fd_reserve.h).
*/
#include "fd_reserve.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "context.h"

/*
** Sessions' files are removed on job threads (discard.h) as well as on
** the loop: without the lock, two of them could close one descriptor
** twice, the second time one that another thread had just been given.
*/
static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;

void fd_reserve_restore(void) {
  provider *ctx = provider_ctx();
  unsigned want = sizeof ctx->spare_fds / sizeof ctx->spare_fds[0];
  pthread_mutex_lock(&reserve_lock);
  while (ctx->nspare < want) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    ctx->spare_fds[ctx->nspare++] = fd;
  }
  pthread_mutex_unlock(&reserve_lock);
}

void fd_reserve_release(void) {
  provider *ctx = provider_ctx();
  pthread_mutex_lock(&reserve_lock);
  while (ctx->nspare > 0) close(ctx->spare_fds[--ctx->nspare]);
  pthread_mutex_unlock(&reserve_lock);
}
