/*
 * Wake-up FIFOs in /dev/shm, for shared-memory plugins whose peers wake a
 * sleeper by writing a byte (ofi+shm's doorbell, ofi_bell.c; ucx+shm's
 * contact FIFO, ucx_contact.c). The owner makes its FIFO and keeps it open
 * read-write in its poll set (a writer of its own: no hang-up when a
 * peer's end closes, and the open never waits); a peer opens it read-write
 * too (a FIFO whose owner died has no reader: a write-only open fails, a
 * write would raise SIGPIPE), writes, and closes. Both check that what
 * they opened is a FIFO of our uid, not another kind of file someone put
 * at the path (mode 0600 in a sticky directory).
 */
#ifndef HM_NA_WAKEFIFO_H
#define HM_NA_WAKEFIFO_H

#include <stddef.h>
#include <stdint.h>

/*
 * FNV-1a's steps over `len` bytes from the offset 1469598103934665603, not
 * FNV's 14695981039346656037 (src/group/gclass.c has that one): a name's
 * part of a FIFO path. Kept as it is: processes of different builds must
 * name each other's FIFOs and ofi+shm doorbell pages alike (ofi_sweep.c
 * parses those names too), and any spread of the hash serves here.
 */
uint64_t hmi_na_wakefifo_hash(const void *bytes, size_t len);
/* Make the FIFO at `path` (replacing one already there: a dead owner's of
 * the same name) and open it; the fd, or -1 with errno. */
int hmi_na_wakefifo_make(const char *path);
/* Open a peer's FIFO at `path`; the fd, or -1 (errno EPERM: not ours). */
int hmi_na_wakefifo_open_peer(const char *path);
/* Write one byte; a full FIFO (EAGAIN) will wake its reader anyway. 0, or
 * -1 with errno on another failure. */
int hmi_na_wakefifo_ring(int fd);

#endif
