/*
** Fuzzing the provider's profiles file (host/provider/profile.c): each
** input is a whole file, loaded through profiles_load as `serve
** --profiles FILE` loads it. Asserts, besides no sanitizer report: a load
** either succeeds or says why in a non-empty message, the built-in
** profiles are there either way, and what a loaded profile holds is what
** the provider can use and report (valid UTF-8 text, "K=V" environment
** entries, absolute bind paths).
*/
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "profile.h"

static int file = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  unsetenv("SMOLWF_PROFILES");
  file = memfd_create("profiles.json", MFD_CLOEXEC);
  if (file < 0) fuzz_fail("memfd_create failed");
  snprintf(path, sizeof path, "/proc/self/fd/%d", file);
  return 0;
}

static void put_input(const uint8_t *data, size_t size) {
  if (ftruncate(file, 0) != 0 || pwrite(file, data, size, 0) != (ssize_t)size) fuzz_fail("cannot write the input file");
}

static void check_text(const char *what, const char *s) {
  if (s && !fuzz_utf8_valid(s, strlen(s))) fuzz_fail("a loaded profile's %s is not UTF-8", what);
}

static void check_profile(const profile *p) {
  check_text("name", p->name);
  if (!strchr(p->name, '/')) fuzz_fail("profile name `%s` has no provider part", p->name);
  for (char **e = p->env; e && *e; e++) {
    check_text("env entry", *e);
    if (!strchr(*e, '=') || **e == '=') fuzz_fail("profile %s: env entry `%s` is not K=V", p->name, *e);
  }
  for (size_t i = 0; i < p->nbinds; i++) {
    check_text("bind host path", p->binds[i].host_path);
    check_text("bind sandbox path", p->binds[i].sandbox_path);
    if (p->binds[i].host_path[0] != '/' || p->binds[i].sandbox_path[0] != '/')
      fuzz_fail("profile %s: a bind path is not absolute", p->name);
  }
  check_text("root", p->root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  put_input(data, size);
  char err[1024] = "";
  int rc = profiles_load(path, err, sizeof err);
  if (rc != 0 && (rc != -1 || err[0] == '\0')) fuzz_fail("a refused profiles file needs a message (rc %d)", rc);
  if (!profile_find("local", "default") || !profile_find("auto", "default")) fuzz_fail("a built-in profile is missing");
  size_t n;
  const profile *all = profiles_all(&n);
  for (size_t i = 0; i < n; i++) check_profile(&all[i]);
  profiles_free();
  return 0;
}
