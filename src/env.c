/* env.c — reading the environment switches: the accepted spellings in one
 * place, an unrecognised value recorded as the backend's last error. */
#include "env.h"

#include <stdlib.h>
#include <strings.h>

int mdr_env_switch(mdr_backend *b, const char *name, const char *who) {
  static const char *const k_on[] = {"1", "true", "yes", "on"};
  static const char *const k_off[] = {"", "0", "false", "no", "off"};
  const char *v = getenv(name);
  if (!v) return 0;
  for (size_t i = 0; i < sizeof k_on / sizeof k_on[0]; i++)
    if (strcasecmp(v, k_on[i]) == 0) return 1;
  for (size_t i = 0; i < sizeof k_off / sizeof k_off[0]; i++)
    if (strcasecmp(v, k_off[i]) == 0) return 0;
  mdr_backend_fail(b, MDR_OK, "%s: %s=\"%.40s\" not recognised (on: 1, true, yes, on; off: 0, false, no, off): "
                   "taken as off", who, name, v);
  return 0;
}
