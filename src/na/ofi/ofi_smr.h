/*
 * The start of libfabric 1.17's shm region header (struct smr_region in
 * include/ofi_shm.h, SMR_VERSION 4), as far as the lock guarding the
 * region's command queue and inject buffers: ofi_shmlock.c watches that
 * lock, and the test that kills a holder (tests/hostile/shm_lock_holder.c)
 * takes it.
 */
#ifndef HM_NA_OFI_SMR_H
#define HM_NA_OFI_SMR_H

#include <pthread.h>
#include <stdint.h>

#define HMI_SMR_REGION_VERSION 4

struct hmi_smr_region_head {
    uint8_t version;
    uint8_t resv;
    uint16_t flags;
    int pid;
    uint8_t cma_cap_peer;
    uint8_t cma_cap_self;
    uint32_t max_sar_buf_per_peer;
    void *base_addr;
    pthread_spinlock_t lock;
};

#endif
