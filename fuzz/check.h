/*
** What every harness asserts about the lines the code under test writes,
** checked independently of that code (its own UTF-8 validator, cJSON's
** parse): a failed check prints why and aborts, which libFuzzer reports
** as a finding and the replay program as a failed test.
*/
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* Prints "fuzz: " and the message, then aborts. */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Whether the n bytes at s are UTF-8 (RFC 3629: no overlong form, no surrogate, nothing above U+10FFFF). */
bool fuzz_utf8_valid(const char *s, size_t n);

/*
** One reply line (without its '\n'): UTF-8, one JSON object and nothing
** after it, with an `id` and exactly one of result, error, event.
** Returns the parsed object (the caller deletes it).
*/
cJSON *fuzz_check_reply(const char *line, size_t len);

/* An id as a key for counting: a UTF-8 string's JSON text, an integer's digits, "null". NULL: not a sound id. */
char *fuzz_id_key(const cJSON *id);

#endif
