/* trace.c — NVTX ranges (src/trace.h). */
#include "trace.h"

static const char *const k_names[MDR_TRACE_WHAT_COUNT][MDR_TRACE_KINDS] = {
    {"mdr step EXACT", "mdr step LADDER", "mdr step DYNAMIC"},
    {"mdr capture EXACT", "mdr capture LADDER", "mdr capture DYNAMIC"},
    {"mdr prepare EXACT", "mdr prepare LADDER", "mdr prepare DYNAMIC"},
    {"mdr zero zero_all", "mdr zero zero_all_rows", "mdr zero zero_prefill_essentials"},
};

const char *mdr_trace_name(mdr_trace_what what, int kind) {
  if ((int)what < 0 || what >= MDR_TRACE_WHAT_COUNT || kind < 0 || kind >= MDR_TRACE_KINDS) return "mdr";
  return k_names[what][kind];
}

#if defined(MDR_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>

#include <stdlib.h>

static nvtxDomainHandle_t g_domain;
static nvtxStringHandle_t g_strings[MDR_TRACE_WHAT_COUNT][MDR_TRACE_KINDS];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* A tool attaches through NVTX_INJECTION64_PATH (Nsight Systems sets it in
 * the programs it launches); without one, a range costs one load and a
 * branch, not a call into NVTX. */
static int g_tool;

static void trace_init(void) {
  g_tool = getenv("NVTX_INJECTION64_PATH") != NULL;
  if (!g_tool) return;
  g_domain = nvtxDomainCreateA("mdr");
  for (int w = 0; w < MDR_TRACE_WHAT_COUNT; w++)
    for (int k = 0; k < MDR_TRACE_KINDS; k++) g_strings[w][k] = nvtxDomainRegisterStringA(g_domain, k_names[w][k]);
}

void mdr_trace_push(mdr_trace_what what, int kind, uint64_t tokens) {
  pthread_once(&g_once, trace_init);
  if (!g_tool) return;
  nvtxEventAttributes_t at = {0};
  at.version = NVTX_VERSION;
  at.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  if ((int)what < 0 || what >= MDR_TRACE_WHAT_COUNT || kind < 0 || kind >= MDR_TRACE_KINDS) {
    at.messageType = NVTX_MESSAGE_TYPE_ASCII; /* still pushed: every push has its pop */
    at.message.ascii = "mdr";
  } else {
    at.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    at.message.registered = g_strings[what][kind];
  }
  at.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  at.payload.llValue = (int64_t)tokens;
  nvtxDomainRangePushEx(g_domain, &at);
}

void mdr_trace_pop(void) {
  if (g_tool) nvtxDomainRangePop(g_domain);
}
#endif
