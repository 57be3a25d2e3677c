/* plain_line.c: an exec's started, exited and result lines in their usual bytes. */
#ifndef SMOLWF_PLAIN_LINE_H
#define SMOLWF_PLAIN_LINE_H

#include <stddef.h>

enum { PLAIN_NONE, PLAIN_STARTED, PLAIN_EXITED, PLAIN_RESULT };

typedef struct plain_line {
  int kind;                 /* PLAIN_*: PLAIN_NONE when the line is not one of them */
  long long id, exit_code;  /* exit_code: PLAIN_EXITED and PLAIN_RESULT */
  const char *process_id;   /* PLAIN_STARTED: inside the line, not terminated */
  size_t process_id_len;
} plain_line;

/* 1 when the len bytes at line are one of the three lines (*out says which), else 0. */
int plain_line_match(const char *line, size_t len, plain_line *out);

#endif
