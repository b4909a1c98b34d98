/* status.c — status names (from the X-macro in status.h). */
#include "mdr/status.h"

const char *mdr_status_string(mdr_status s) {
  switch (s) {
#define MDR_STATUS_CASE_(name, text) \
  case name: return text;
    MDR_STATUS_LIST(MDR_STATUS_CASE_)
#undef MDR_STATUS_CASE_
    default: return "unknown status";
  }
}
