/*
** Opening a session's file to read or write its bytes, so that no file
** operation can wait on another process: the open never blocks (a FIFO
** without a writer, a file another process holds a lease on) and nothing
** is read or written before fstat has shown a regular file. FIFOs,
** sockets and devices are refused (invalid_request, naming what it is);
** a leased file is io_error at once instead of the kernel's 45 s wait.
*/
#ifndef SMOL_FILE_OPEN_H
#define SMOL_FILE_OPEN_H

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "failure.h"
#include "paths.h"

/* Opens p to read: a regular file (st filled), or -1 with f filled (a directory: is_a_directory). */
int file_open_read(const resolved *p, const char *what, struct stat *st, failure *f);

/*
** Opens p to write: creates it with exactly `mode` (no umask) when it
** does not exist, else opens the regular file there, appending or
** truncated. -1 with f filled when it cannot.
*/
int file_open_write(const resolved *p, const char *what, bool append, mode_t mode, failure *f);

#endif
