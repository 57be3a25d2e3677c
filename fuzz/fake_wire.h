/*
** The harnesses' wire (fake_wire.c): wire.h, plus the lines written.
*/
#ifndef FUZZ_FAKE_WIRE_H
#define FUZZ_FAKE_WIRE_H

#include "wire.h"

/* Every line written since the last clear, each ended by '\n'. */
const char *fake_wire_output(size_t *len);
void fake_wire_clear(void);

#endif
