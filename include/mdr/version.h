/* mdr — version macros and the runtime version. */
#ifndef MDR_VERSION_H
#define MDR_VERSION_H

#include "mdr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MDR_VERSION_MAJOR 0
#define MDR_VERSION_MINOR 1
#define MDR_VERSION_PATCH 0
#define MDR_VERSION_NUMBER (MDR_VERSION_MAJOR * 10000 + MDR_VERSION_MINOR * 100 + MDR_VERSION_PATCH)

/* The version of the library linked at run time, as MDR_VERSION_NUMBER
 * (major*10000 + minor*100 + patch). Thread-safe. */
MDR_API unsigned mdr_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
