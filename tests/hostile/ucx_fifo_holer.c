/*
 * ucx_fifo_holer PID: the ucx+shm attacker of dead_writers.sh. It takes a
 * slot of each receive FIFO of process PID, as a sender does (the FIFO's
 * head moves by one), and dies without writing it, as a sender SIGKILLed
 * between the two steps does. It needs to read and write PID's memory
 * (/proc/PID/mem: ptrace rights); without them it exits 77 (skip).
 *
 * It knows the FIFO as UCX 1.13 lays it out (src/na/ucx/ucx_mm.h): a
 * control block whose first word is the head and whose second cache line
 * holds the tail and the owner's pid, in a shared mapping of whole pages.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "na/ucx/ucx_mm.h"


/* Take one slot of the FIFO at `ctl` in PID's memory; 0 on success. */
static int take_slot(int mem, uintptr_t ctl)
{
    uint64_t head;
    if (pread(mem, &head, sizeof(head), (off_t)ctl) != (ssize_t)sizeof(head))
        return -1;
    uint64_t taken = (head & ~HMI_UCX_MM_HEAD_ARMED) + 1; /* an armed owner is not rung */
    if (pwrite(mem, &taken, sizeof(taken), (off_t)ctl) != (ssize_t)sizeof(taken))
        return -1;
    printf("ucx_fifo_holer: took slot %" PRIu64 " of the FIFO at %#" PRIxPTR "\n",
           head & ~HMI_UCX_MM_HEAD_ARMED, ctl);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PID\n", argv[0]);
        return 2;
    }
    int pid = atoi(argv[1]);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
    FILE *maps = fopen(path, "r");
    snprintf(path, sizeof(path), "/proc/%d/mem", pid);
    int mem = open(path, O_RDWR);
    if (maps == NULL || mem < 0) {
        perror("ucx_fifo_holer: /proc/PID/maps or mem");
        return 77;
    }
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t map_size = (HMI_UCX_MM_FIFO_BYTES + (uintptr_t)page - 1) / (uintptr_t)page *
                         (uintptr_t)page;
    char line[512];
    int taken = 0;
    while (fgets(line, sizeof(line), maps) != NULL) {
        uintptr_t lo, hi;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) != 2 || hi - lo != map_size ||
            (strstr(line, "/ucx_shm_posix_") == NULL && strstr(line, "/SYSV") == NULL))
            continue;
        int owner = 0;
        if (pread(mem, &owner, sizeof(owner), (off_t)(lo + HMI_UCX_MM_PID_OFF)) !=
                (ssize_t)sizeof(owner) || owner != pid)
            continue;
        if (take_slot(mem, lo) != 0) {
            perror("ucx_fifo_holer: /proc/PID/mem");
            return 77;
        }
        taken++;
    }
    if (taken == 0) {
        fprintf(stderr, "ucx_fifo_holer: no receive FIFO of pid %d (not UCX 1.13's layout?)\n",
                pid);
        return 77;
    }
    fflush(stdout);
    raise(SIGKILL);
    return 1;
}
