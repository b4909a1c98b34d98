/* env.c — reading the environment switches: the accepted spellings in one
 * place, an unrecognised value recorded as the backend's last error. */
#include "env.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <strings.h>

int mdr_env_switch(mdr_backend *b, const char *name, const char *who) { return mdr_env_switch_or(b, name, who, 0); }

int mdr_env_switch_or(mdr_backend *b, const char *name, const char *who, int dflt) {
  static const char *const k_on[] = {"1", "true", "yes", "on"};
  static const char *const k_off[] = {"", "0", "false", "no", "off"};
  const char *v = getenv(name);
  if (!v) return dflt;
  for (size_t i = 0; i < sizeof k_on / sizeof k_on[0]; i++)
    if (strcasecmp(v, k_on[i]) == 0) return 1;
  for (size_t i = 0; i < sizeof k_off / sizeof k_off[0]; i++)
    if (strcasecmp(v, k_off[i]) == 0) return 0;
  mdr_backend_fail(b, MDR_OK, "%s: %s=\"%.40s\" not recognised (on: 1, true, yes, on; off: 0, false, no, off): "
                   "taken as %s", who, name, v, dflt ? "on (its default)" : "off");
  return dflt;
}

long mdr_env_ms(mdr_backend *b, const char *name, const char *who) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end = NULL;
  errno = 0;
  const long t = strtol(v, &end, 10);
  if (v[0] >= '0' && v[0] <= '9' && errno == 0 && end && *end == '\0' && t > 0 && t <= INT_MAX) return t;
  mdr_backend_fail(b, MDR_OK, "%s: %s=\"%.40s\" is not a positive number of milliseconds: taken as unset", who, name,
                   v);
  return 0;
}
