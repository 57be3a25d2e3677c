/*
** SHA-256 (see sha256.h). libcrypto is opened with dlopen at the first
** digest instead of being linked: mapping and relocating it at every start
** cost each smolwf run ~1 ms, about 40% of starting an empty script
** (measured side by side, 3 x 200 runs of `smolwf empty.lua`: 1.9-2.3 ms
** without it, 3.1-3.7 ms with it preloaded), and most runs hash nothing.
** SMOLWF_LIBCRYPTO is the library's soname, found by CMake where it found
** the headers, so the version loaded is the one compiled against.
*/
#include "sha256.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <uv.h>

/* The part of EVP we use, resolved from the loaded library. */
typedef struct evp_api {
  EVP_MD_CTX *(*ctx_new)(void);
  void (*ctx_free)(EVP_MD_CTX *);
  const EVP_MD *(*sha256)(void);
  int (*init)(EVP_MD_CTX *, const EVP_MD *, ENGINE *);
  int (*update)(EVP_MD_CTX *, const void *, size_t);
  int (*final)(EVP_MD_CTX *, unsigned char *, unsigned int *);
} evp_api;

static evp_api evp;
static char load_error[256];
static bool loaded;
static uv_once_t load_once = UV_ONCE_INIT;

/* dlsym's object pointer into a function pointer, the way POSIX allows it. */
static bool resolve(void *lib, const char *name, void *fn_slot) {
  void *sym = dlsym(lib, name);
  if (sym == NULL) {
    snprintf(load_error, sizeof load_error, "%s: no symbol %s", SMOLWF_LIBCRYPTO, name);
    return false;
  }
  memcpy(fn_slot, &sym, sizeof sym);
  return true;
}

static void load(void) {
  void *lib = dlopen(SMOLWF_LIBCRYPTO, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    snprintf(load_error, sizeof load_error, "cannot load %s: %s", SMOLWF_LIBCRYPTO, dlerror());
    return;
  }
  loaded = resolve(lib, "EVP_MD_CTX_new", &evp.ctx_new) && resolve(lib, "EVP_MD_CTX_free", &evp.ctx_free) &&
           resolve(lib, "EVP_sha256", &evp.sha256) && resolve(lib, "EVP_DigestInit_ex", &evp.init) &&
           resolve(lib, "EVP_DigestUpdate", &evp.update) && resolve(lib, "EVP_DigestFinal_ex", &evp.final);
  /* Kept open for good: the process digests again, and OpenSSL cleans up at exit. */
}

const char *sha256_unavailable(void) {
  uv_once(&load_once, load);
  return loaded ? NULL : load_error;
}

sha256 *sha256_new(void) {
  if (sha256_unavailable() != NULL) return NULL;
  EVP_MD_CTX *ctx = evp.ctx_new();
  if (ctx != NULL && evp.init(ctx, evp.sha256(), NULL) != 1) {
    evp.ctx_free(ctx);
    ctx = NULL;
  }
  return (sha256 *)ctx;
}

bool sha256_update(sha256 *d, const void *data, size_t len) {
  return evp.update((EVP_MD_CTX *)d, data, len) == 1;
}

bool sha256_final(sha256 *d, char hex[SHA256_HEX_LEN + 1]) {
  static const char digits[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (evp.final((EVP_MD_CTX *)d, md, &len) != 1 || len * 2 != SHA256_HEX_LEN) return false;
  for (unsigned i = 0; i < len; i++) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  hex[SHA256_HEX_LEN] = '\0';
  return true;
}

void sha256_free(sha256 *d) {
  if (d != NULL) evp.ctx_free((EVP_MD_CTX *)d);
}
