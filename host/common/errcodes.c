#include "errcodes.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#define E(x) {#x, x}
static const struct { const char *name; int err; } errno_names[] = {
  E(ENOENT), E(EEXIST), E(ENOTEMPTY), E(EACCES), E(EPERM), E(EXDEV), E(ELOOP),
  E(EROFS), E(EISDIR), E(ENOTDIR), E(EFBIG), E(ENOSPC), E(EDQUOT), E(EMFILE),
  E(ENFILE), E(ENOMEM), E(E2BIG), E(EINVAL), E(ENAMETOOLONG),
};
#undef E

const char *errno_code(int err) {
  switch (err) {
    case ENOENT: return "not_found";
    case EEXIST: case ENOTEMPTY: return "already_exists";
    case EACCES: case EPERM: case EXDEV: case ELOOP: case EROFS: return "permission_denied";
    case EISDIR: return "is_a_directory";
    case ENOTDIR: return "not_a_directory";
    case EFBIG: case ENOSPC: case EDQUOT: case EMFILE: case ENFILE: case ENOMEM: case E2BIG: return "limit_exceeded";
    case EINVAL: case ENAMETOOLONG: return "invalid_request";
    default: return "io_error";
  }
}

const char *errno_name_code(const char *name) {
  for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
    if (strcmp(errno_names[i].name, name) == 0) return errno_code(errno_names[i].err);
  return "io_error";
}
