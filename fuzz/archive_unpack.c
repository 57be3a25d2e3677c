/*
** Fuzzing tar extraction (host/provider/unpack.c): each input is an
** archive, extracted with unpack_memory beneath a fresh directory that
** holds two symlinks leading out of it (one relative, one absolute) into
** a canary directory beside it. Asserts, besides no sanitizer report:
** the canary and the directory around both are exactly as before (names,
** types, sizes, modes, mtimes), and a refusal has a protocol error code
** and a message. (The message quotes entry names as they are, any bytes:
** what prints it makes it UTF-8, reply.c and unpack_main.c.)
*/
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tree.h"
#include "tree_listing.h"
#include "unpack.h"

/* The disk allowance of the extraction: keeps a sparse file's length (counted whole) from filling the disk. */
#define DISK_CAP (8u * 1024 * 1024)

static char base[4096], target[4200], canary[4200];
static char *canary_before, *base_before;

static void make_target(void) {
  if (mkdir(target, 0700) != 0) fuzz_fail("cannot make %s", target);
  char link[4300];
  snprintf(link, sizeof link, "%s/up", target);
  if (symlink("../canary", link) != 0) fuzz_fail("cannot make %s", link);
  snprintf(link, sizeof link, "%s/abs", target);
  if (symlink(canary, link) != 0) fuzz_fail("cannot make %s", link);
}

/* At exit: the harness's directories removed. */
static void clean_up(void) {
  tree_remove(AT_FDCWD, base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(base, sizeof base, "%s/fuzz-unpack.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(base)) fuzz_fail("cannot make a directory in %s", tmp);
  snprintf(target, sizeof target, "%s/target", base);
  snprintf(canary, sizeof canary, "%s/canary", base);
  tree_listing_make_canary(canary);
  make_target();
  canary_before = tree_listing(canary);
  base_before = tree_listing_top(base);
  atexit(clean_up);
  return 0;
}

static void check_failure(const failure *f) {
  static const char *const codes[] = {"invalid_request", "permission_denied", "already_exists", "limit_exceeded",
                                      "not_found", "not_a_directory", "is_a_directory", "io_error", "internal", NULL};
  bool known = false;
  for (int i = 0; f->code && codes[i]; i++) known |= strcmp(f->code, codes[i]) == 0;
  if (!known) fuzz_fail("unpack failed with an unknown code `%s`", f->code ? f->code : "(none)");
  if (!f->message[0]) fuzz_fail("unpack failed (%s) without a message", f->code);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int dirfd = open(target, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) fuzz_fail("cannot open %s", target);
  unpack_limits lim = {.cap = DISK_CAP, .used = 0, .profile = "fuzz/default", .what = NULL};
  unpack_stats st = {0};
  failure f = {0};
  if (!unpack_memory(dirfd, data, size, &lim, &st, &f)) check_failure(&f);
  close(dirfd);
  tree_listing_expect(canary, canary_before, "the canary beside the target directory");
  tree_listing_expect_top(base, base_before, "the directory around the target");
  int rc = tree_remove(AT_FDCWD, target);
  if (rc < 0) fuzz_fail("cannot remove %s: %s", target, strerror(-rc));
  make_target();
  return 0;
}
