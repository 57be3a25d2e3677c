/*
** `smolwf-provider unpack DIR [ARCHIVE]`: extracts a tar (the file
** ARCHIVE, or stdin) beneath the existing directory DIR with exactly the
** rules of write_archive (unpack.h), and prints one JSON line: the result
** `{"entries": N, "bytes": N}` (exit 0) or `{"error": {"code", "message"}}`
** (exit 1). The host extracts what it reads out of a session this way
** (saved artifacts): the same code, in a process of its own.
*/
#ifndef SMOL_UNPACK_MAIN_H
#define SMOL_UNPACK_MAIN_H

int unpack_main(int argc, char **argv);

#endif
