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

/* The same with `dflt` when unset: a switch that is on by default. */
int mdr_env_switch_or(mdr_backend *b, const char *name, const char *who, int dflt);

/* The milliseconds `name` sets: a positive decimal integer, or 0 when
 * unset or empty. Any other value counts as 0 (unset) and is reported as
 * mdr_env_switch reports. */
long mdr_env_ms(mdr_backend *b, const char *name, const char *who);

#endif
