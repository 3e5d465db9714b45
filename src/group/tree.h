/*
 * Collective trees (pure functions, no state): who a rank's parent and
 * children are in a k-nomial, k-ary or flat tree over n positions rooted at
 * position `root`. Positions index the collective's live list (the group's
 * ranks in increasing order minus the excluded ones); every rank computes
 * the same tree from the same (live list, root, kind, k).
 *
 * Trees are built over relative positions rel = (pos - root) mod n, so the
 * root is always relative 0:
 *  - k-nomial (radix k): rel's children are rel + j*k^m for every power
 *    k^m > rel and j = 1..k-1 (below n); its parent is rel with its
 *    highest base-k digit cleared. k = 2 is the binomial tree.
 *  - k-ary: rel's children are k*rel+1 .. k*rel+k; parent (rel-1)/k.
 *  - flat: the root's children are everyone; everyone's parent is the root.
 * Children come largest subtree first, so the deepest branch starts first.
 */
#ifndef HM_GROUP_TREE_H
#define HM_GROUP_TREE_H

#include <stdint.h>

#include <hermod/group.h>

#define HMI_TREE_NONE UINT32_MAX /* the root's parent */
#define HMI_TREE_K_MAX 64u

struct hmi_tree {
    hm_tree_kind_t t_kind;
    uint32_t t_k;    /* 2..HMI_TREE_K_MAX; ignored for flat */
    uint32_t t_n;    /* positions, >= 1 */
    uint32_t t_root; /* < t_n */
};

/* hmi_tree_valid: kind known, k in range (flat: any), n >= 1, root < n. */
bool hmi_tree_valid(const struct hmi_tree *tree);

/* hmi_tree_parent: the parent position of `pos`, HMI_TREE_NONE for the root. */
uint32_t hmi_tree_parent(const struct hmi_tree *tree, uint32_t pos);

/*
 * hmi_tree_children: write up to `max` children of `pos` to `out` (may be
 * NULL with max 0) and return how many there are in all.
 */
uint32_t hmi_tree_children(const struct hmi_tree *tree, uint32_t pos, uint32_t *out,
                           uint32_t max);

/*
 * hmi_tree_subtree_size: how many positions the subtree of `pos` holds, `pos`
 * included (a bound on what its answer may count). O(log n).
 */
uint32_t hmi_tree_subtree_size(const struct hmi_tree *tree, uint32_t pos);

/* hmi_tree_in_subtree: whether position `pos` is `top` or below it. O(depth). */
bool hmi_tree_in_subtree(const struct hmi_tree *tree, uint32_t top, uint32_t pos);

/*
 * hmi_tree_live: the live list: `ranks` (count, strictly increasing, none
 * HM_RANK_NONE) minus the `excl_count` ranks of `excl` (any order, repeats
 * allowed; ranks not in `ranks` ignored), written to `out` (room for count,
 * not `ranks` itself). Returns its length. O((count + excl_count) log count).
 */
uint32_t hmi_tree_live(const hm_rank_t *ranks, uint32_t count, const hm_rank_t *excl,
                       uint32_t excl_count, hm_rank_t *out);

/* hmi_tree_find: position of `rank` in an increasing list, HMI_TREE_NONE if absent. */
uint32_t hmi_tree_find(const hm_rank_t *ranks, uint32_t count, hm_rank_t rank);

#endif
