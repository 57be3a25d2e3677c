/*
** libarchive, loaded when the provider first needs it.
**
** Linking it would load its whole dependency chain (libxml2, ICU,
** libstdc++, the compressors, nettle, acl: twelve more libraries) into
** every start of smolwf-provider, `serve` and the sandbox `helper` alike:
** measured, 300 starts took 3.4 s instead of 1.6 s (about 6 ms more per
** start), which every session start and every provider start would pay
** for an extension most sessions never use. So the library is opened with
** dlopen at the first archive, on that archive's worker thread, and its
** functions are reached through the table below, each with the type its
** header declares.
*/
#ifndef SMOL_ARCHIVE_LIB_H
#define SMOL_ARCHIVE_LIB_H

#include <archive.h>
#include <archive_entry.h>

#include "failure.h"

/* The functions used, by their own names. */
#define ARCHIVE_LIB_FUNCTIONS(X) \
  X(archive_error_string) X(archive_set_error) \
  X(archive_read_new) X(archive_read_support_format_tar) X(archive_read_support_format_empty) \
  X(archive_read_open) X(archive_read_next_header) X(archive_read_data_block) X(archive_read_free) \
  X(archive_write_new) X(archive_write_set_format_pax) X(archive_write_open2) \
  X(archive_write_header) X(archive_write_data) X(archive_write_close) X(archive_write_free) \
  X(archive_entry_new) X(archive_entry_free) X(archive_entry_clear) \
  X(archive_entry_pathname) X(archive_entry_filetype) X(archive_entry_perm) X(archive_entry_size) \
  X(archive_entry_mtime) X(archive_entry_mtime_nsec) X(archive_entry_mtime_is_set) \
  X(archive_entry_symlink) X(archive_entry_hardlink) \
  X(archive_entry_set_pathname) X(archive_entry_set_filetype) X(archive_entry_set_perm) \
  X(archive_entry_set_size) X(archive_entry_set_mtime) X(archive_entry_set_symlink)

typedef struct archive_lib {
#define ARCHIVE_LIB_FIELD(name) __typeof__(name) *name;
  ARCHIVE_LIB_FUNCTIONS(ARCHIVE_LIB_FIELD)
#undef ARCHIVE_LIB_FIELD
} archive_lib;

/* The loaded library (once per process, thread-safe); NULL with f filled when it cannot be loaded. */
const archive_lib *archive_lib_get(failure *f);

#endif
