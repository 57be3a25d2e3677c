/*
** What a session announces in its `capabilities` (docs/protocol.md,
** extensions): the flags of every extension this provider implements,
** and what the session really enforces (isolation, network).
*/
#ifndef SMOL_CAPABILITIES_H
#define SMOL_CAPABILITIES_H

#include <cjson/cJSON.h>

#include "session.h"

/* The capabilities object of an open session (its backend chosen). */
cJSON *capabilities_of(const session *s);

#endif
