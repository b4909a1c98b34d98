/* ar_twin.h — the host twin of mdr's all-reduce kernels (src/ar_twin.c),
 * for the host communicator (src/comm_host.c). */
#ifndef MDR_AR_TWIN_H
#define MDR_AR_TWIN_H

#include "all_reduce_impl.h"

/* Run call k of rank c through the protocol (kernels/ar_protocol.h), the
 * transport's part of k filled. MDR_OK, or MDR_ERR_STATE after giving up
 * (the report written, the group aborted, the text recorded on c's
 * backend). */
mdr_status mdr_ar_twin_run(mdr_comm *c, const mdr_ar_call *k);

/* Elements [lo, hi) of k's rows: the sum over the nranks ranks' rows, in
 * rank order, stored into every rank's rows (NCCL's twin). */
void mdr_ar_twin_sum(const mdr_ar_call *k, int nranks, size_t lo, size_t hi);

/* residual = round(residual + rows) over the first `count` elements of
 * this rank's rows. */
void mdr_ar_twin_residual(const mdr_ar_call *k, size_t count);

/* The fused RMSNorm of the first `rows` rows: norm_output from the
 * residual's rows (after the add), as the kernels compute it. */
void mdr_ar_twin_norm(const mdr_ar_call *k, size_t rows);

#endif
