/*
 * UCX 1.13's shared-memory receive FIFO (src/uct/sm/mm/base/mm_iface.h)
 * with its default geometry: what ucx_fifo.c repairs, and what the test
 * that half-writes one (tests/hostile/ucx_fifo_holer.c) takes a slot of.
 *
 * A control block (two cache lines and a third for alignment: the head
 * with the "armed" flag in its top bit, the owner's wake-up socket packed
 * after it; then the tail and the owner's pid), then the slots. A slot is
 * written once its owner bit equals its lap's parity (index / slots).
 */
#ifndef HM_NA_UCX_MM_H
#define HM_NA_UCX_MM_H

#include <stdint.h>

#define HMI_UCX_MM_CTL_SIZE 192u     /* sizeof(uct_mm_fifo_ctl_t), cache-line aligned */
#define HMI_UCX_MM_SIGLEN_OFF 8u     /* socklen_t of the owner's wake-up socket */
#define HMI_UCX_MM_SIGADDR_OFF 12u   /* its struct sockaddr_un */
#define HMI_UCX_MM_TAIL_OFF 128u
#define HMI_UCX_MM_PID_OFF 136u
#define HMI_UCX_MM_SLOTS 64u         /* UCX_*_FIFO_SIZE default */
#define HMI_UCX_MM_SLOT_SIZE 128u    /* UCX_*_FIFO_ELEM_SIZE default */
#define HMI_UCX_MM_HEAD_ARMED ((uint64_t)1 << 63)
#define HMI_UCX_MM_FLAG_OWNER 0x1u
#define HMI_UCX_MM_FLAG_INLINE 0x2u
/* Bytes UCX maps for one FIFO before rounding to pages (UCT_MM_GET_FIFO_SIZE). */
#define HMI_UCX_MM_FIFO_BYTES \
    (HMI_UCX_MM_CTL_SIZE + HMI_UCX_MM_SLOTS * HMI_UCX_MM_SLOT_SIZE + 63u)

/* The start of a slot (uct_mm_fifo_element_t). */
struct hmi_ucx_mm_slot {
    uint8_t flags;
    uint8_t am_id;
    uint16_t length;
};

#endif
