#include "io/checkpoint.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "io/json_file.h"

#define SINGLE_FILE "model.safetensors"
#define INDEX_FILE "model.safetensors.index.json"
#define MAX_INDEX_BYTES ((size_t)64 << 20)
#define MAX_SHARDS 65536
#define MAX_SHARD_NAME 255
/* Loads at least this large print a progress line per shard. */
#define NAME_SHOWN 200

struct lm_checkpoint {
    char *dir;
    lm_safetensors **shards;
    size_t n_shards;
    lm_tensor *tensors; /* every tensor of every shard, sorted by name */
    size_t count;
    size_t total_bytes;
    void (*release)(void *owner); /* lm_checkpoint_from_tensors: frees what holds the tensors */
    void *owner;
};

/* The shard files to open, by name inside the folder. */
typedef struct {
    const char **names; /* sorted, unique; point into the index JSON or at SINGLE_FILE */
    size_t count;
} shard_list;

static lm_status join_path(const char *dir, const char *file, char *out, size_t size,
                           lm_error *err) {
    size_t dlen = strlen(dir);
    const char *sep = dlen && dir[dlen - 1] == '/' ? "" : "/";
    int n = snprintf(out, size, "%s%s%s", dir, sep, file);
    if (n < 0 || (size_t)n >= size) return lm_fail(err, LM_ERR_INVALID, "%s: path too long", dir);
    return LM_OK;
}

static bool is_regular_file(const char *path) {
    struct stat info;
    return stat(path, &info) == 0 && S_ISREG(info.st_mode);
}

/* ---- the index ---- */

/* Shard names come from an untrusted file: they must name a file inside the
 * folder, nothing else. */
static bool valid_shard_name(const char *name) {
    size_t len = strlen(name);
    return len > 0 && len <= MAX_SHARD_NAME && !strchr(name, '/') && !strchr(name, '\\') &&
           !strstr(name, "..") && strcmp(name, ".") != 0;
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the weight_map and collects its distinct shard names. */
static lm_status collect_shards(const char *index_path, const cJSON *weight_map, shard_list *list,
                                lm_error *err) {
    size_t n = 0;
    for (const cJSON *e = weight_map->child; e; e = e->next, n++) {
        if (!cJSON_IsString(e))
            return lm_fail(err, LM_ERR_FORMAT, "%s: weight_map value of '%.*s' must be a string",
                           index_path, NAME_SHOWN, e->string);
        if (!valid_shard_name(e->valuestring))
            return lm_fail(err, LM_ERR_FORMAT,
                           "%s: tensor '%.*s' maps to '%.*s', which is not a plain file name",
                           index_path, NAME_SHOWN, e->string, NAME_SHOWN, e->valuestring);
    }
    if (n == 0) return lm_fail(err, LM_ERR_FORMAT, "%s: weight_map is empty", index_path);
    list->names = malloc(n * sizeof *list->names);
    if (!list->names) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", index_path);
    size_t i = 0;
    for (const cJSON *e = weight_map->child; e; e = e->next) list->names[i++] = e->valuestring;
    qsort(list->names, n, sizeof *list->names, compare_strings);
    size_t unique = 0;
    for (i = 0; i < n; i++)
        if (unique == 0 || strcmp(list->names[unique - 1], list->names[i]) != 0)
            list->names[unique++] = list->names[i];
    list->count = unique;
    if (unique > MAX_SHARDS)
        return lm_fail(err, LM_ERR_FORMAT, "%s: more than %d shard files", index_path, MAX_SHARDS);
    return LM_OK;
}

static lm_status read_index(const char *index_path, cJSON **root, const cJSON **weight_map,
                            lm_error *err) {
    lm_status s = lm_json_read_file(index_path, MAX_INDEX_BYTES, root, err);
    if (s != LM_OK) return s;
    *weight_map = cJSON_GetObjectItemCaseSensitive(*root, "weight_map");
    if (!cJSON_IsObject(*weight_map))
        return lm_fail(err, LM_ERR_FORMAT, "%s: \"weight_map\" must be an object", index_path);
    return LM_OK;
}

/* ---- opening shards ---- */

static size_t shard_index(const shard_list *list, const char *name) {
    const char **found = bsearch(&name, list->names, list->count, sizeof *list->names,
                                 compare_strings);
    return found ? (size_t)(found - list->names) : list->count;
}

/* Sum of the shard file sizes: the bytes a read-mode load will read. */
static uint64_t shard_bytes_on_disk(const char *dir, const shard_list *list) {
    uint64_t total = 0;
    char path[4096];
    for (size_t i = 0; i < list->count; i++) {
        struct stat info;
        if (join_path(dir, list->names[i], path, sizeof path, NULL) == LM_OK &&
            stat(path, &info) == 0)
            total += (uint64_t)info.st_size;
    }
    return total;
}

static lm_status open_shards(lm_checkpoint *ck, const shard_list *list, lm_load_mode mode,
                             const lm_progress *progress, lm_error *err) {
    ck->shards = calloc(list->count, sizeof *ck->shards);
    if (!ck->shards) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", ck->dir);
    if (mode == LM_LOAD_READ) lm_progress_add(progress, LM_PROGRESS_READING, 0, shard_bytes_on_disk(ck->dir, list));
    char path[4096];
    for (size_t i = 0; i < list->count; i++) {
        lm_status s = join_path(ck->dir, list->names[i], path, sizeof path, err);
        if (s != LM_OK) return s;
        s = lm_safetensors_open_with(path, mode, progress, &ck->shards[i], err);
        if (s != LM_OK) return s;
        ck->n_shards = i + 1;
    }
    return LM_OK;
}

/* Every tensor the index lists must be in the shard it names. */
static lm_status check_index_entries(const lm_checkpoint *ck, const char *index_path,
                                     const cJSON *weight_map, const shard_list *list,
                                     lm_error *err) {
    for (const cJSON *e = weight_map->child; e; e = e->next) {
        size_t i = shard_index(list, e->valuestring);
        if (i == list->count || !lm_safetensors_find(ck->shards[i], e->string))
            return lm_fail(err, LM_ERR_FORMAT,
                           "%s: tensor '%.*s' is listed in %.*s but that file does not contain it",
                           index_path, NAME_SHOWN, e->string, NAME_SHOWN, e->valuestring);
    }
    return LM_OK;
}

/* ---- merging every shard's tensors into one sorted table ---- */

typedef struct {
    lm_tensor tensor;
    size_t shard;
} shard_tensor;

static int compare_shard_tensors(const void *a, const void *b) {
    const shard_tensor *x = a, *y = b;
    int c = strcmp(x->tensor.name, y->tensor.name);
    if (c) return c;
    return (x->shard > y->shard) - (x->shard < y->shard);
}

/* Among tensors of one name found in several shards, picks the one in the
 * shard the index names; without an index entry the name is ambiguous. */
static lm_status pick_duplicate(const lm_checkpoint *ck, const shard_tensor *run, size_t n,
                                const cJSON *weight_map, const shard_list *list,
                                const lm_tensor **picked, lm_error *err) {
    const cJSON *listed =
        weight_map ? cJSON_GetObjectItemCaseSensitive(weight_map, run[0].tensor.name) : NULL;
    size_t want = listed ? shard_index(list, listed->valuestring) : list->count;
    for (size_t i = 0; i < n; i++)
        if (run[i].shard == want) {
            *picked = &run[i].tensor;
            return LM_OK;
        }
    return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' is in both %s and %s", ck->dir,
                   NAME_SHOWN, run[0].tensor.name, list->names[run[0].shard],
                   list->names[run[1].shard]);
}

static lm_status gather_tensors(const lm_checkpoint *ck, shard_tensor **out, size_t *count,
                                lm_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < ck->n_shards; i++) total += lm_safetensors_count(ck->shards[i]);
    shard_tensor *all = malloc((total ? total : 1) * sizeof *all);
    if (!all) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", ck->dir);
    size_t k = 0;
    for (size_t i = 0; i < ck->n_shards; i++)
        for (size_t j = 0; j < lm_safetensors_count(ck->shards[i]); j++)
            all[k++] = (shard_tensor){*lm_safetensors_at(ck->shards[i], j), i};
    qsort(all, total, sizeof *all, compare_shard_tensors);
    *out = all;
    *count = total;
    return LM_OK;
}

static lm_status merge_tensors(lm_checkpoint *ck, const cJSON *weight_map,
                               const shard_list *list, lm_error *err) {
    shard_tensor *all = NULL;
    size_t total = 0;
    lm_status s = gather_tensors(ck, &all, &total, err);
    if (s != LM_OK) return s;
    ck->tensors = malloc((total ? total : 1) * sizeof *ck->tensors);
    if (!ck->tensors) s = lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", ck->dir);
    for (size_t i = 0; s == LM_OK && i < total;) {
        size_t run = 1;
        while (i + run < total && strcmp(all[i].tensor.name, all[i + run].tensor.name) == 0) run++;
        const lm_tensor *picked = &all[i].tensor;
        if (run > 1) s = pick_duplicate(ck, &all[i], run, weight_map, list, &picked, err);
        if (s == LM_OK) {
            ck->tensors[ck->count++] = *picked;
            ck->total_bytes += picked->n_bytes;
        }
        i += run;
    }
    free(all);
    return s;
}

/* ---- public ---- */

static lm_status open_folder(lm_checkpoint *ck, lm_load_mode mode, const lm_progress *progress, lm_error *err) {
    char index_path[4096], single_path[4096];
    lm_status s = join_path(ck->dir, INDEX_FILE, index_path, sizeof index_path, err);
    if (s == LM_OK) s = join_path(ck->dir, SINGLE_FILE, single_path, sizeof single_path, err);
    if (s != LM_OK) return s;
    struct stat info;
    if (stat(ck->dir, &info) != 0)
        return lm_fail(err, LM_ERR_IO, "%s: cannot open: %s", ck->dir, strerror(errno));
    if (!S_ISDIR(info.st_mode)) return lm_fail(err, LM_ERR_IO, "%s: not a folder", ck->dir);

    cJSON *index = NULL;
    const cJSON *weight_map = NULL;
    const char *single[] = {SINGLE_FILE};
    shard_list list = {single, 1};
    bool indexed = is_regular_file(index_path);
    if (indexed) {
        list = (shard_list){NULL, 0};
        s = read_index(index_path, &index, &weight_map, err);
        if (s == LM_OK) s = collect_shards(index_path, weight_map, &list, err);
    } else if (!is_regular_file(single_path)) {
        s = lm_fail(err, LM_ERR_IO, "no %s or %s in %s", SINGLE_FILE, INDEX_FILE, ck->dir);
    }
    if (s == LM_OK) s = open_shards(ck, &list, mode, progress, err);
    if (s == LM_OK && indexed) s = check_index_entries(ck, index_path, weight_map, &list, err);
    if (s == LM_OK) s = merge_tensors(ck, weight_map, &list, err);
    if (indexed) free(list.names);
    cJSON_Delete(index);
    return s;
}

lm_status lm_checkpoint_open(const char *dir, lm_load_mode mode, lm_checkpoint **out,
                             lm_error *err) {
    return lm_checkpoint_open_with(dir, mode, NULL, out, err);
}

lm_status lm_checkpoint_open_with(const char *dir, lm_load_mode mode, const lm_progress *progress,
                                  lm_checkpoint **out, lm_error *err) {
    *out = NULL;
    lm_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = strdup(dir))) {
        free(ck);
        return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", dir);
    }
    lm_status s = open_folder(ck, mode, progress, err);
    if (s != LM_OK) {
        lm_checkpoint_close(ck);
        return s;
    }
    *out = ck;
    return LM_OK;
}

static int compare_tensors_by_name(const void *a, const void *b) {
    return strcmp(((const lm_tensor *)a)->name, ((const lm_tensor *)b)->name);
}

lm_status lm_checkpoint_from_tensors(const char *dir, const lm_tensor *tensors, size_t count,
                                     void (*release)(void *owner), void *owner, lm_checkpoint **out,
                                     lm_error *err) {
    *out = NULL;
    lm_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = strdup(dir)) || !(ck->tensors = malloc((count ? count : 1) * sizeof *ck->tensors))) {
        if (ck) free(ck->dir);
        free(ck);
        if (release) release(owner);
        return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", dir);
    }
    ck->release = release;
    ck->owner = owner;
    memcpy(ck->tensors, tensors, count * sizeof *tensors);
    ck->count = count;
    qsort(ck->tensors, count, sizeof *ck->tensors, compare_tensors_by_name);
    for (size_t i = 0; i < count; i++) {
        if (i && strcmp(ck->tensors[i - 1].name, ck->tensors[i].name) == 0) {
            lm_status s = lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' appears twice", dir, NAME_SHOWN,
                                  ck->tensors[i].name);
            lm_checkpoint_close(ck);
            return s;
        }
        ck->total_bytes += ck->tensors[i].n_bytes;
    }
    *out = ck;
    return LM_OK;
}

void lm_checkpoint_close(lm_checkpoint *ck) {
    if (!ck) return;
    if (ck->release) ck->release(ck->owner);
    for (size_t i = 0; i < ck->n_shards; i++) lm_safetensors_close(ck->shards[i]);
    free(ck->shards);
    free(ck->tensors);
    free(ck->dir);
    free(ck);
}

static int compare_name_to_tensor(const void *key, const void *element) {
    return strcmp((const char *)key, ((const lm_tensor *)element)->name);
}

const lm_tensor *lm_checkpoint_find(const lm_checkpoint *ck, const char *name) {
    if (!ck->count) return NULL;
    return bsearch(name, ck->tensors, ck->count, sizeof *ck->tensors, compare_name_to_tensor);
}

size_t lm_checkpoint_count(const lm_checkpoint *ck) { return ck->count; }

const lm_tensor *lm_checkpoint_at(const lm_checkpoint *ck, size_t i) {
    return i < ck->count ? &ck->tensors[i] : NULL;
}

size_t lm_checkpoint_total_bytes(const lm_checkpoint *ck) { return ck->total_bytes; }

const char *lm_checkpoint_dir(const lm_checkpoint *ck) { return ck->dir; }
