/* env.h — the environment switches the library reads (README.md,
 * "Environment"). Internal. */
#ifndef MDR_ENV_H
#define MDR_ENV_H

#include "backend_impl.h"

/* The switch `name` of the environment: 1 when set to 1, true, yes or on;
 * 0 when unset or set to "", 0, false, no or off (any case, nothing
 * around). Any other value counts as off and is reported: its text is
 * recorded as backend b's last error in the calling thread (the call that
 * read it still succeeds), so an unrecognised value is never ignored
 * silently. `who` names the reader in that text ("arena", "graph cache"). */
int mdr_env_switch(mdr_backend *b, const char *name, const char *who);

#endif
