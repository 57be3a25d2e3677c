/*
** UTF-8 as JSON needs it (RFC 3629: no overlong forms, no surrogates,
** nothing above U+10FFFF): checking text, cutting it at a character
** boundary, and repairing it. Every line the provider writes is valid
** UTF-8; text that comes from elsewhere (a file name, a command's
** words) passes through here first.
*/
#ifndef SMOL_UTF8_H
#define SMOL_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Whether the n bytes at s are valid UTF-8; if not, *bad (when not NULL) is the offset of the first bad byte. */
bool utf8_valid(const char *s, size_t n, size_t *bad);

/* The length of the valid sequence at s (n bytes left, n > 0), or 0 when s does not start one. */
size_t utf8_sequence_len(const char *s, size_t n);

/* The length of s without a last character cut short (text cut at a byte count: vsnprintf, %.80s). */
size_t utf8_complete(const char *s, size_t n);

/* The longest prefix of s (n bytes) of at most max bytes that does not end inside a character. */
size_t utf8_prefix(const char *s, size_t n, size_t max);

/*
** A copy of the n bytes at s (malloc'ed, NUL-terminated) where every
** byte that is not part of a valid sequence became U+FFFD; *outlen (when
** not NULL) gets its length. NULL when memory is gone.
*/
char *utf8_repair(const char *s, size_t n, size_t *outlen);

/* The length utf8_repair gives the n bytes at s. */
size_t utf8_repaired_len(const char *s, size_t n);

/* utf8_repair into out (room for utf8_repaired_len bytes, not NUL-terminated); returns the length written. */
size_t utf8_repair_into(const char *s, size_t n, char *out);

#endif
