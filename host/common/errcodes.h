/*
** The protocol's error codes for operating-system failures: the one
** errno -> code table, shared by the provider (its file operations and
** process starts) and the host (sandbox.host{} and failed provider starts).
*/
#ifndef SMOL_ERRCODES_H
#define SMOL_ERRCODES_H

/* The protocol code for a positive errno value ("not_found", ...; "io_error" for the rest). */
const char *errno_code(int err);

/* The same for an errno's symbolic name ("ENOENT", as libuv names errors); "io_error" when unknown. */
const char *errno_name_code(const char *name);

#endif
