/* mdr — metrale decode runtime: the umbrella header. */
#ifndef MDR_MDR_H
#define MDR_MDR_H

#include "mdr/version.h"
#include "mdr/status.h"
#include "mdr/backend.h"
#include "mdr/config.h"
#include "mdr/sizes.h"
#include "mdr/arena.h"
#include "mdr/graph.h"
#include "mdr/comm.h"

#endif
