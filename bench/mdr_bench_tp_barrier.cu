/* mdr_bench_tp_barrier.cu — NCCL's side of mdr-bench-tp --barrier
 * (declared in bench_tp.h): a device communicator with one LSA barrier per
 * block, and a kernel whose every block opens one ncclLsaBarrierSession
 * (NCCL's device API, nccl_device/lsa_barrier.h) and syncs it `barriers`
 * times. mdr's side is the real block barrier of the two-shot
 * (mdr_cuda_ar_barrier_bench, kernels/all_reduce.cu); the driver is
 * mdr_bench_tp_barrier.c.
 *
 * No NVLink multicast: the requirements ask for none (lsaMultimem false,
 * no team requirements), every session is opened unicast (its multicast
 * argument false: peer inboxes reached by plain stores over NVLink), and
 * the barrier is ncclLsaBarrierSession, never ncclBarrierSession (whose
 * LSA part may use NVLink multicast) nor a GIN barrier.
 *
 * The check (wrong != NULL) is the one mdr's side runs: before barrier i,
 * the last thread of block b (another warp than thread 0, which raises and
 * polls the flags) writes mdr_ar_barrier_check_value(salt, rank, b, i)
 * into every rank's slot [i & 1][b][rank] (uint32 words in a buffer of the
 * device communicator's resource window, reached through LSA pointers);
 * after it, it reads its own slots of every rank; each wrong value adds one
 * to *wrong. The two parities keep a peer's next write (after barrier i,
 * before i + 1) off the slot being read.
 *
 * Launch: the grid (one barrier per block: at most the count the device
 * communicator was made with), MDR_AR_THREADS threads a block, as mdr's
 * side. Built only with NCCL's device API (MDR_HAVE_NCCL_DEVICE). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <string.h>

#include <new>

#if defined(MDR_HAVE_NCCL_DEVICE)
#include <nccl_device.h>

#include "all_reduce.h" /* MDR_AR_THREADS, mdr_ar_barrier_check_value: the same block size and check as mdr's side */

struct tp_nccl_barrier {
  ncclDevComm dc;
  ncclDevResourceHandle check; /* 2 * grid * lsaSize uint32 words */
  unsigned grid;               /* lsaBarrierCount */
};

namespace {

template <bool CHECK>
__global__ void __launch_bounds__(MDR_AR_THREADS)
    tp_nccl_barrier_kernel(ncclDevComm dc, ncclDevResourceHandle check, unsigned barriers, uint32_t *wrong,
                           uint32_t salt) {
  /* one session per block, on barrier blockIdx.x of the LSA team; the last
   * argument is the session's NVLink multicast switch: off, unicast only */
  const bool nvlink_multicast = false;
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc, ncclTeamTagLsa(), blockIdx.x, nvlink_multicast);
  const int rank = dc.lsaRank, n = dc.lsaSize;
  for (unsigned i = 0; i < barriers; i++) {
    const size_t slots = ((size_t)(i & 1u) * gridDim.x + blockIdx.x) * (size_t)n;
    if (CHECK && threadIdx.x == blockDim.x - 1)
      for (int r = 0; r < n; r++)
        ((volatile uint32_t *)ncclGetResourceBufferLsaPointer(dc, check, r))[slots + rank] =
            mdr_ar_barrier_check_value(salt, rank, blockIdx.x, i);
    /* acquire and release, as each of the two-shot's barriers needs (and
     * as mdr's block barrier always does) */
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
    if (CHECK && threadIdx.x == blockDim.x - 1) {
      const volatile uint32_t *own = (const volatile uint32_t *)ncclGetResourceBufferLocalPointer(dc, check);
      for (int r = 0; r < n; r++)
        if (own[slots + r] != mdr_ar_barrier_check_value(salt, r, blockIdx.x, i)) atomicAdd(wrong, 1u);
    }
  }
}

}  // namespace

extern "C" int tp_nccl_barrier_create(ncclComm_t comm, unsigned grid, tp_nccl_barrier **out) {
  *out = nullptr;
  int nranks = 0;
  ncclResult_t r = ncclCommCount(comm, &nranks);
  if (r != ncclSuccess) return (int)r;
  tp_nccl_barrier *nb = new (std::nothrow) tp_nccl_barrier();
  if (!nb) return (int)ncclSystemError;
  nb->grid = grid;
  ncclDevResourceRequirements check;
  memset(&check, 0, sizeof check);
  check.bufferSize = (size_t)2 * grid * (size_t)nranks * sizeof(uint32_t);
  check.bufferAlign = 128;
  check.outBufferHandle = &nb->check;
  /* NCCL's initialiser where the headers have one (2.29 on), zeros before
   * (as mdr_cuda_ar_devcomm_create) */
#if defined(NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER)
  ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof reqs);
#endif
  reqs.lsaMultimem = false; /* never NVLink multicast */
  reqs.lsaBarrierCount = (int)grid;
  reqs.resourceRequirementsList = &check;
  r = ncclDevCommCreate(comm, &reqs, &nb->dc);
  if (r != ncclSuccess) {
    delete nb;
    return (int)r;
  }
  *out = nb;
  return 0;
}

extern "C" void tp_nccl_barrier_team(const tp_nccl_barrier *nb, int *rank, int *nranks, int *lsa_rank, int *lsa_size) {
  *rank = nb->dc.rank;
  *nranks = nb->dc.nRanks;
  *lsa_rank = nb->dc.lsaRank;
  *lsa_size = nb->dc.lsaSize;
}

extern "C" int tp_nccl_barrier_launch(cudaStream_t s, const tp_nccl_barrier *nb, unsigned barriers, uint32_t *wrong,
                                      uint32_t salt) {
  if (wrong) {
    tp_nccl_barrier_kernel<true><<<nb->grid, MDR_AR_THREADS, 0, s>>>(nb->dc, nb->check, barriers, wrong, salt);
  } else {
    tp_nccl_barrier_kernel<false><<<nb->grid, MDR_AR_THREADS, 0, s>>>(nb->dc, nb->check, barriers, nullptr, 0);
  }
  return (int)cudaGetLastError();
}

extern "C" int tp_nccl_barrier_destroy(ncclComm_t comm, tp_nccl_barrier *nb) {
  if (!nb) return 0;
  const ncclResult_t r = ncclDevCommDestroy(comm, &nb->dc);
  delete nb;
  return (int)r;
}

#endif
