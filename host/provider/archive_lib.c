/*
** Loading libarchive (see archive_lib.h).
*/
#define _GNU_SOURCE
#include "archive_lib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <uv.h>

/* Its soname since libarchive 3.0; Debian's libarchive13 package. */
#define LIBARCHIVE_SONAME "libarchive.so.13"

static archive_lib lib;
static char load_error[512];
static uv_once_t once = UV_ONCE_INIT;

static void load(void) {
  void *h = dlopen(LIBARCHIVE_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!h) { snprintf(load_error, sizeof load_error, "%s", dlerror()); return; }
#define ARCHIVE_LIB_LOAD(name) \
  if (!(lib.name = (__typeof__(name) *)dlsym(h, #name))) { \
    snprintf(load_error, sizeof load_error, "%s has no %s", LIBARCHIVE_SONAME, #name); \
    return; \
  }
  ARCHIVE_LIB_FUNCTIONS(ARCHIVE_LIB_LOAD)
#undef ARCHIVE_LIB_LOAD
  /* The library stays loaded until the process ends: the table points into it. */
}

const archive_lib *archive_lib_get(failure *f) {
  uv_once(&once, load);
  if (!load_error[0]) return &lib;
  fail(f, "unsupported", "archives need libarchive, which cannot be loaded here: %s", load_error);
  return NULL;
}
