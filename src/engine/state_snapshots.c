#include "engine/state_snapshots.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_state_snapshots_init(lm_state_snapshots *s, int capacity, lm_error *err) {
    memset(s, 0, sizeof *s);
    s->newest = s->oldest = -1;
    if (capacity <= 0) return LM_OK;
    s->entries = calloc((size_t)capacity, sizeof *s->entries);
    if (!s->entries) return lm_fail(err, LM_ERR_NOMEM, "out of memory for %d state snapshots", capacity);
    lm_status st = lm_id_pool_init(&s->free, capacity, "state snapshots", err);
    if (st != LM_OK) {
        lm_state_snapshots_free(s);
        return st;
    }
    s->capacity = capacity;
    return LM_OK;
}

void lm_state_snapshots_free(lm_state_snapshots *s) {
    free(s->entries);
    lm_id_pool_free(&s->free);
    memset(s, 0, sizeof *s);
    s->newest = s->oldest = -1;
}

static void unlink_entry(lm_state_snapshots *s, int id) {
    lm_snapshot *e = &s->entries[id];
    if (e->newer >= 0) s->entries[e->newer].older = e->older;
    else s->newest = e->older;
    if (e->older >= 0) s->entries[e->older].newer = e->newer;
    else s->oldest = e->newer;
    e->newer = e->older = -1;
}

static void push_newest(lm_state_snapshots *s, int id) {
    lm_snapshot *e = &s->entries[id];
    e->older = s->newest;
    e->newer = -1;
    if (s->newest >= 0) s->entries[s->newest].newer = id;
    s->newest = id;
    if (s->oldest < 0) s->oldest = id;
}

static void drop(lm_state_snapshots *s, int id) {
    unlink_entry(s, id);
    s->entries[id].used = false;
    int32_t freed = id;
    lm_id_pool_give_back(&s->free, &freed, 1);
    s->n_used--;
}

int lm_state_snapshots_add(lm_state_snapshots *s, int pos, int32_t block, uint64_t block_number) {
    if (s->capacity == 0) return -1;
    if (s->free.n_free == 0) drop(s, s->oldest);
    int32_t id;
    if (lm_id_pool_take(&s->free, 1, &id, NULL) != LM_OK) return -1;
    s->entries[id] = (lm_snapshot){.used = true, .pos = pos, .block = block, .block_number = block_number,
                                   .newer = -1, .older = -1};
    push_newest(s, id);
    s->n_used++;
    return id;
}

void lm_state_snapshots_touch(lm_state_snapshots *s, int id) {
    unlink_entry(s, id);
    push_newest(s, id);
}

void lm_state_snapshots_drop_block(lm_state_snapshots *s, int32_t block, uint64_t number) {
    for (int id = 0; id < s->capacity; id++)
        if (s->entries[id].used && s->entries[id].block == block && s->entries[id].block_number == number)
            drop(s, id);
}

void lm_state_snapshots_clear(lm_state_snapshots *s) {
    while (s->oldest >= 0) drop(s, s->oldest);
}
