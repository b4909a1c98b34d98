/* version.c — the runtime version. */
#include "mdr/version.h"

unsigned mdr_version_number(void) { return MDR_VERSION_NUMBER; }
