/*
** SHA-256 digests with OpenSSL's EVP interface (which uses the CPU's SHA
** extensions or AVX2 where it has them), from a libcrypto loaded on the
** first digest rather than at start-up (see sha256.c).
*/
#ifndef SMOLWF_SHA256_H
#define SMOLWF_SHA256_H

#include <stdbool.h>
#include <stddef.h>

#define SHA256_HEX_LEN 64

typedef struct sha256 sha256;

/*
** NULL once libcrypto is loaded, else why it cannot be. Call it on the
** loop's thread before the first digest (it loads the library once; the
** thread pool then only uses it).
*/
const char *sha256_unavailable(void);

/* A new digest, or NULL (out of memory, or libcrypto unavailable). */
sha256 *sha256_new(void);

bool sha256_update(sha256 *d, const void *data, size_t len);

/* Writes the digest as SHA256_HEX_LEN hex digits and a NUL into hex. */
bool sha256_final(sha256 *d, char hex[SHA256_HEX_LEN + 1]);

/* Frees d (NULL is fine). */
void sha256_free(sha256 *d);

#endif
