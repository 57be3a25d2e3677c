/*
** Standard base64 (RFC 4648, with padding), shared by the host and the
** provider. Every binary payload of the protocol travels through here.
*/
#ifndef SMOL_BASE64_H
#define SMOL_BASE64_H

#include <stddef.h>

/* Bytes needed to encode n bytes (no terminating NUL counted). */
size_t b64_encoded_len(size_t n);

/* Upper bound of the bytes that n base64 characters decode to. */
size_t b64_decoded_maxlen(size_t n);

/* Encodes n bytes of src into dst (b64_encoded_len(n) bytes); returns that length. */
size_t b64_encode(const unsigned char *src, size_t n, char *dst);

/*
** Decodes n characters of src into dst (b64_decoded_maxlen(n) bytes).
** Returns 0 and sets *outlen, or -1 when src is not valid padded base64
** (wrong length, a character outside the alphabet, misplaced padding);
** then *outlen is the offset of the first bad character.
*/
int b64_decode(const char *src, size_t n, unsigned char *dst, size_t *outlen);

#endif
