/*
 * shm_lock_holder PID: the ofi+shm attacker of dead_writers.sh. It takes
 * the lock of the region of PID's first endpoint (/dev/shm/hm-PID-0-*,
 * Hermod's names) and dies holding it, as a peer killed inside libfabric's
 * shm provider (between its lock and unlock of a receiver's queue) does.
 *
 * It knows the region's header as libfabric 1.17 lays it out
 * (src/na/ofi/ofi_smr.h); a region of another version makes it exit 77
 * (skip).
 */
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "na/ofi/ofi_smr.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PID\n", argv[0]);
        return 2;
    }
    char pattern[64];
    snprintf(pattern, sizeof(pattern), "/dev/shm/hm-%d-0-*", atoi(argv[1]));
    glob_t found;
    char region[256];
    bool one = glob(pattern, 0, NULL, &found) == 0 && found.gl_pathc == 1;
    if (one)
        snprintf(region, sizeof(region), "%s", found.gl_pathv[0]);
    globfree(&found);
    if (!one) {
        fprintf(stderr, "shm_lock_holder: no single region %s\n", pattern);
        return 1;
    }
    int fd = open(region, O_RDWR | O_NOFOLLOW);
    if (fd < 0) {
        perror(region);
        return 1;
    }
    struct hmi_smr_region_head *head =
        mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (head == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    if (head->version != HMI_SMR_REGION_VERSION) {
        fprintf(stderr, "shm_lock_holder: region version %u, not 4: layout unknown\n",
                head->version);
        return 77;
    }
    if (pthread_spin_lock(&head->lock) != 0)
        return 1;
    printf("shm_lock_holder: holding the lock of %s (owner pid %d); dying\n", region,
           head->pid);
    fflush(stdout);
    raise(SIGKILL);
    return 1;
}
