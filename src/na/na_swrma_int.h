/*
 * RMA over messages: state shared by the engine's files (internal).
 *
 *   na_swrma.c        per-context state, send buffers, job records, receive
 *                     dispatch, progress, stats
 *   na_swrma_req.c    the requester: ops by request id, pieces cut into
 *                     messages, a window per op, replies checked and placed
 *   na_swrma_owner.c  the owner: every request checked against the key table
 *                     (hmi_keytab_pin) at the moment it copies
 *   na_swrma_cancel.c the requester's CANCELs of gets given up
 *   na_swrma_peer.c   per-peer records: a peer's share of the send buffers,
 *                     the owner's jobs and the requester's window, per peer
 *   na_swrma_wire.c   the wire format (na_swrma_wire.h)
 *
 * Everything here runs with the context serialized (na.h, "Threads").
 */
#ifndef HM_NA_SWRMA_INT_H
#define HM_NA_SWRMA_INT_H

#include "na/na_rma.h"
#include "na/na_swrma_wire.h"
#include "util/hmap.h"

/*
 * Bounds, per context. Send buffers are c_eager_limit bytes each, made on
 * first need and pooled, s_bufs_max of them (SWRMA_BUFS, env HM_SWRMA_BUFS);
 * the requester may hold three quarters of them (s_req_max) so the owner's
 * replies always find one. Owner jobs (a get being streamed, or
 * a reply waiting for a buffer) are pooled records, at most s_jobs_max
 * (SWRMA_JOBS, env HM_SWRMA_JOBS), and
 * at most s_jobs_peer_max (SWRMA_JOBS_PEER, env HM_SWRMA_JOBS_PEER) of one
 * peer, the peer being the address the plugin delivered the request from.
 * CANCELs that found no buffer wait in a ring of SWRMA_CANCELS.
 *
 * Per peer (a record while it has jobs, live ops or sends in flight): at
 * most SWRMA_SHARE of the send buffers in flight to it, so a peer that
 * stops reading holds at most that many and the others keep theirs; its
 * work waits in its own queue (peers are served round-robin). The
 * requester keeps at most s_window requests (GET_REQ pieces unanswered,
 * PUT_DATA unacknowledged) outstanding at one peer, SWRMA_PEER_WINDOW or
 * half the per-peer job cap if lower, so its own owner never refuses it
 * over that cap (each outstanding request is at most one job there; the
 * margin covers pieces given up whose CANCEL is still on its way).
 */
/*
 * Context-wide bounds, sized so that a coalition of peers that stop
 * reading must be large to starve the others: each holds at most
 * SWRMA_SHARE buffers and SWRMA_JOBS_PEER jobs, so it takes 32 such peers
 * to hold every buffer and 16 to hold every job record. Past that, peers
 * that hold buffers and took none of our messages for s_stall_ns
 * (HM_SWRMA_STALL_MS) while others' work waits for a buffer (or others'
 * gets are refused for want of a job record) are given up
 * (hmi_na_peer_drop), which hands their buffers and jobs back. Buffers are made on
 * need (at most 256 x the eager limit by default, 16 MiB at 64 KiB), job
 * records at the first transfer (about 460 KB).
 */
#define SWRMA_BUFS 256u          /* default of HM_SWRMA_BUFS (na_tunable.c) */
#define SWRMA_SWEEP_NS 100000000u /* stalled peers are looked for at most this often */
#define SWRMA_SWEEP_MAX 64u      /* peers given up per sweep */
#define SWRMA_JOBS 4096u         /* default of HM_SWRMA_JOBS (na_tunable.c) */
#define SWRMA_JOBS_PEER 256u     /* default per-peer cap: HM_SWRMA_JOBS_PEER's default (na_tunable.c) */
#define SWRMA_CANCELS 64u
#define SWRMA_SHARE 8u           /* send buffers in flight to one peer */
#define SWRMA_PEER_WINDOW 64u    /* requests outstanding at one peer (requester) */
#define SWRMA_PEER_CHUNK 64u     /* peer records are made this many at a time */
#define SWRMA_WINDOW 8u          /* PUT_DATA messages unacknowledged per op */
#define SWRMA_AHEAD 32u          /* GET_DATA runs placed past a piece's prefix, per op */
#define SWRMA_TABLE_MIN 64u      /* requester table's first size (doubles) */
#define SWRMA_TABLE_MAX (1u << 24)

struct swrma_peer;

/* A send buffer and the NA op that sends it. */
struct swrma_buf {
    struct hmi_swrma_ctx *sb_ctx;
    struct swrma_peer *sb_peer;  /* while sending: the peer it counts against, or NULL */
    hmi_na_op_t *sb_op;           /* o_arg = this buffer */
    unsigned char *sb_data;      /* msg_buf_alloc'ed, c_eager_limit bytes */
    void *sb_desc;
    uint64_t sb_req;             /* requester message: its request id (a failed send
                                    fails that op); 0 for the owner's */
    struct swrma_buf *sb_next;   /* free list */
};

enum swrma_job_kind {
    SWRMA_JOB_GET = 1,           /* stream a region to the requester */
    SWRMA_JOB_REPLY = 2,         /* PUT_ACK or ERR waiting for a buffer */
};

/* An owner's queued work for one request. */
struct swrma_job {
    struct hmi_list j_link;      /* its peer's pr_jobs, or the free list */
    hmi_na_addr_t *j_peer;        /* one reference (addr_ref) while queued */
    struct swrma_peer *j_prec;   /* j_peer's record, while queued */
    uint64_t j_id;
    uint8_t j_kind;
    uint8_t j_reply_type;        /* REPLY: SWRMA_PUT_ACK or SWRMA_ERR */
    uint64_t j_value;            /* REPLY: bytes placed or status */
    uint32_t j_slot;             /* GET: the request as asked */
    struct hmi_keytab_key j_key;
    uint64_t j_off;
    uint64_t j_len;
    uint64_t j_sent;             /* GET: bytes sent so far */
    size_t j_max_msg;            /* GET: largest message to send (both sides' limit) */
};

/* A CANCEL the requester could not send yet. */
struct swrma_cancel {
    hmi_na_addr_t *c_peer;        /* one reference (addr_ref) */
    uint64_t c_id;
};

/*
 * A reply the owner could not send at once, kept in its peer's record: it
 * needs no send buffer's contents and no job record, only these.
 */
struct swrma_note {
    uint64_t n_id;                /* the request it answers */
    uint32_t n_value;             /* PUT_ACK: bytes placed (one message's); ERR: status */
    uint8_t n_type;               /* SWRMA_PUT_ACK or SWRMA_ERR */
};

/*
 * One peer, as the plugin delivered it (the address pointer, never a field
 * of a message), while it has work here. Not referenced: jobs hold their
 * address, ops borrow theirs from the caller, and the record only keys on
 * the pointer (it holds one reference itself while replies are noted in
 * pr_notes, about 1.1 KB a record with them). Pooled (s_peer_free), found
 * by s_peers.
 */
struct swrma_peer {
    hmi_na_addr_t *pr_addr;       /* the key */
    struct hmi_list pr_all;      /* s_peers_used, or s_peer_free */
    struct hmi_list pr_owner_link; /* on s_owner_ready: jobs queued, share not full */
    struct hmi_list pr_req_link; /* on s_req_ready: ops to send, share and window not full */
    struct hmi_list pr_jobs;     /* owner: its queued jobs, served in turn */
    struct hmi_list pr_sendq;    /* requester: its ops with a message to send */
    uint32_t pr_jobs_n;          /* owner: jobs queued (per-peer cap) */
    uint32_t pr_bufs;            /* send buffers in flight to it (SWRMA_SHARE) */
    uint32_t pr_asked;           /* requester: requests outstanding (s_window) */
    uint32_t pr_ops;             /* requester: live ops with it */
    uint32_t pr_nnotes;          /* owner: replies noted in pr_notes, not sent yet
                                    (the record then holds a reference on pr_addr) */
    struct swrma_note pr_notes[SWRMA_PEER_WINDOW];
    uint64_t pr_moved_ns;        /* while pr_bufs > 0: when a send to it last completed,
                                    or its first one in flight was posted */
    bool pr_held_share;          /* work waiting at a full share (counted once) */
    bool pr_held_window;         /* ops waiting at a full window (counted once) */
};

/* One entry of the requester's table; the request id names it. */
struct swrma_entry {
    struct swrma_op *e_op;       /* NULL: free */
    uint32_t e_gen;              /* bumped at every use; ids of older uses fail */
    uint32_t e_next_free;
};

/* One piece of a requester's op, as posted. */
struct swrma_piece {
    unsigned char *p_local;      /* the local bytes (region base + local offset) */
    uint32_t p_slot;
    struct hmi_keytab_key p_key;
    uint64_t p_remote_off;
    uint64_t p_len;
    uint64_t p_next;             /* PUT: bytes sent; GET: 0, or p_len once asked */
    uint64_t p_done;             /* PUT: bytes acknowledged; GET: bytes placed from
                                    offset 0 on without a gap (runs past it: q_ahead) */
};

/* GET_DATA placed past its piece's p_done (arrived ahead of a gap). */
struct swrma_run {
    uint64_t r_off;
    uint64_t r_len;
    unsigned int r_piece;
};

/* A requester's op (hmi_na_op_t.o_rma). */
struct swrma_op {
    hmi_na_op_t *q_op;
    struct hmi_list q_sendq;     /* on its peer's pr_sendq while it has a message to send */
    hmi_na_addr_t *q_peer;        /* borrowed: the caller keeps it (na.h) */
    struct swrma_peer *q_prec;   /* q_peer's record, while posted */
    enum hmi_na_rma_dir q_dir;
    unsigned int q_count;
    uint32_t q_index;            /* entry in the table, while posted */
    uint32_t q_gen;
    unsigned int q_inflight;     /* PUT_DATA unacknowledged / GET_REQ unanswered */
    uint64_t q_left;             /* bytes not yet acknowledged or placed */
    unsigned int q_nahead;       /* GET: runs in q_ahead */
    struct swrma_run q_ahead[SWRMA_AHEAD];
    bool q_posted;               /* in the table */
    struct swrma_piece q_pieces[HM_NA_RMA_IOV_MAX];
};

/* Per-context state (hmi_na_context_t.x_rma). */
struct hmi_swrma_ctx {
    hmi_na_context_t *s_ctx;
    size_t s_buf_size;           /* c_eager_limit */
    struct swrma_buf *s_bufs;    /* s_bufs_max records, made at init */
    unsigned int s_bufs_max;     /* HM_SWRMA_BUFS */
    unsigned int s_req_max;      /* of which the requester may hold: 3/4 */
    unsigned int s_bufs_made;
    unsigned int s_bufs_busy;    /* sending */
    unsigned int s_req_busy;     /* of which the requester's */
    struct swrma_buf *s_free_bufs;
    struct swrma_job *s_jobs_mem; /* s_jobs_max records, made on first need */
    unsigned int s_jobs_max;     /* HM_SWRMA_JOBS */
    struct hmi_list s_free_jobs;
    unsigned int s_jobs_queued;
    unsigned int s_jobs_peer_max; /* per-peer cap (at most s_jobs_max) */
    unsigned int s_window;       /* requester: requests outstanding per peer */
    struct hmi_hmap s_peers;     /* peer address -> its record */
    struct hmi_list s_peers_used; /* records in use */
    struct hmi_list s_peer_free; /* records made and free */
    void *s_peer_chunks;         /* made records, SWRMA_PEER_CHUNK at a time (linked) */
    unsigned int s_peers_live;
    struct hmi_list s_owner_ready; /* owner: peers with jobs that may send, round-robin */
    struct hmi_list s_req_ready; /* requester: peers with ops that may send, round-robin */
    struct swrma_cancel s_cancels[SWRMA_CANCELS]; /* ring */
    unsigned int s_cancel_head;
    unsigned int s_cancel_count;
    struct swrma_entry *s_table;
    uint32_t s_table_size;
    uint32_t s_table_free;       /* first free entry, or UINT32_MAX */
    uint32_t s_live_ops;
    uint64_t s_stall_ns;         /* HM_SWRMA_STALL_MS; 0: never give a peer up */
    uint64_t s_sweep_ns;         /* the next look for stalled peers, while starved */
    uint64_t s_look_ns;          /* no look before this (SWRMA_SWEEP_NS apart) */
    bool s_jobs_short;           /* a get was refused HM_BUSY since the last look */
    bool s_in_post;              /* completions go to x_deferred */
    struct hmi_swrma_stats s_stats;
};

static inline struct hmi_swrma_ctx *swrma_of(hmi_na_context_t *ctx)
{
    return ctx->x_rma;
}

/* na_swrma.c */
/* A free send buffer, for the requester (`req`) or the owner; NULL when none. */
struct swrma_buf *hmi_swrma_buf_get(struct hmi_swrma_ctx *s, bool req);
/*
 * Send `len` bytes of `b` to `peer`, counted against its record `pr` (NULL:
 * not counted) until the send completes; on an error the buffer is back in
 * the pool and the error is returned (the message is lost).
 */
hm_return_t hmi_swrma_buf_send(struct hmi_swrma_ctx *s, struct swrma_buf *b,
                               struct swrma_peer *pr, hmi_na_addr_t *peer, size_t len);
/*
 * A free job record for `peer` (j_peer set, referenced; j_prec its record):
 * HM_OVERLOADED at the peer's cap, HM_BUSY at the context's (or without
 * memory). Queue it with hmi_swrma_job_queue.
 */
hm_return_t hmi_swrma_job_get(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer,
                              struct swrma_job **out);
/* Queue `job` at the back of its peer's jobs. */
void hmi_swrma_job_queue(struct hmi_swrma_ctx *s, struct swrma_job *job);
/*
 * Give back a job that is no longer queued; drops its peer reference. Its
 * record stays until the caller's hmi_swrma_peer_update.
 */
void hmi_swrma_job_put(struct hmi_swrma_ctx *s, struct swrma_job *job);

/* na_swrma_peer.c */
/*
 * Note a reply to `pr` (PUT_ACK or ERR, for request `id`) that found no
 * send buffer, to be sent when its share has room (owner progress). False
 * when its notes are full: a peer has at most s_window requests
 * outstanding here, each answered by at most one such reply, which
 * SWRMA_PEER_WINDOW covers. Why: a lost PUT_ACK or ERR leaves the
 * requester's op waiting for ever, and when job records run out (which is
 * when gets are refused HM_BUSY) a reply has none to wait in either.
 */
bool hmi_swrma_peer_note_reply(struct hmi_swrma_ctx *s, struct swrma_peer *pr,
                               enum swrma_type type, uint64_t id, uint32_t value);
/* Forget `pr`'s noted replies (its peer failed, or context close). */
void hmi_swrma_peer_forget_notes(struct hmi_swrma_ctx *s, struct swrma_peer *pr);
/* The record of `addr`, or NULL. */
struct swrma_peer *hmi_swrma_peer_find(const struct hmi_swrma_ctx *s, hmi_na_addr_t *addr);
/* The record of `addr`, made when it has none; NULL without memory. */
struct swrma_peer *hmi_swrma_peer_get(struct hmi_swrma_ctx *s, hmi_na_addr_t *addr);
/* May one more message go to `pr` now (its share not full)? */
bool hmi_swrma_peer_room(const struct swrma_peer *pr);
/*
 * After a change to `pr`: put it on (or off) the ready lists, count work
 * held back, and give the record back once it has nothing (then `pr` must
 * not be used again).
 */
void hmi_swrma_peer_update(struct hmi_swrma_ctx *s, struct swrma_peer *pr);
/* Context close: free every record. */
void hmi_swrma_peers_fini(struct hmi_swrma_ctx *s);
/*
 * Give up (hmi_na_peer_drop) peers that hold send buffers and took none of
 * our messages for s_stall_ns, at most SWRMA_SWEEP_MAX of them; the number
 * given up. The caller knows others wait for a buffer.
 */
unsigned int hmi_swrma_peers_drop_stalled(struct hmi_swrma_ctx *s, uint64_t now);

/* na_swrma_owner.c */
void hmi_swrma_owner_recv(struct hmi_swrma_ctx *s, hmi_na_addr_t *source,
                          const struct swrma_msg *m);
int hmi_swrma_owner_progress(struct hmi_swrma_ctx *s);
void hmi_swrma_owner_peer_failed(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer);
void hmi_swrma_owner_fini(struct hmi_swrma_ctx *s);

/* na_swrma_req.c */
void hmi_swrma_req_recv(struct hmi_swrma_ctx *s, hmi_na_addr_t *source,
                        const struct swrma_msg *m);
int hmi_swrma_req_progress(struct hmi_swrma_ctx *s);

/* na_swrma_cancel.c */
/* CANCEL request `id` at `peer`: now, or once a requester buffer is free. */
void hmi_swrma_cancel_send(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer, uint64_t id);
/* Send the CANCELs that waited for a buffer, oldest first. */
void hmi_swrma_cancels_flush(struct hmi_swrma_ctx *s);
/* CANCELs waiting for a buffer? */
bool hmi_swrma_req_cancels_waiting(const struct hmi_swrma_ctx *s);
/* Forget the waiting CANCELs to `peer` (NULL: all): dead, or the context closes. */
void hmi_swrma_cancels_drop(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer);
/* A requester message for request `id` could not be sent: fail its op. */
void hmi_swrma_req_send_failed(struct hmi_swrma_ctx *s, uint64_t id, hm_return_t status);
void hmi_swrma_req_peer_failed(struct hmi_swrma_ctx *s, hmi_na_addr_t *peer);
void hmi_swrma_req_fini(struct hmi_swrma_ctx *s);

#endif /* HM_NA_SWRMA_INT_H */
