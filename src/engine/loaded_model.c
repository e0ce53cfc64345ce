#include "engine/loaded_model.h"

#include <stdio.h>
#include <string.h>

static lm_status finish_open(lm_loaded_model *m, int threads, lm_error *err) {
    lm_status st = lm_backend_cpu_create(threads, &m->backend, err);
    if (st != LM_OK) lm_loaded_model_close(m);
    return st;
}

lm_status lm_loaded_model_open(lm_loaded_model *m, const char *dir, lm_load_mode mode, int threads,
                               const lm_qwen35_load_options *options, lm_error *err) {
    memset(m, 0, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    lm_status st = lm_qwen35_config_load(path, &m->config, err);
    if (st == LM_OK) st = lm_checkpoint_open(dir, mode, &m->checkpoint, err);
    if (st == LM_OK) {
        st = lm_qwen35_load_with(m->checkpoint, &m->config, options, &m->model, err);
        m->model_loaded = st == LM_OK;
    }
    if (st != LM_OK) {
        lm_loaded_model_close(m);
        return st;
    }
    return finish_open(m, threads, err);
}

lm_status lm_loaded_model_random(lm_loaded_model *m, const char *config_path, uint64_t seed, int threads,
                              lm_error *err) {
    memset(m, 0, sizeof *m);
    lm_status st = lm_qwen35_config_load(config_path, &m->config, err);
    if (st == LM_OK) {
        st = lm_qwen35_load_random(&m->config, seed, &m->model, err);
        m->model_loaded = st == LM_OK;
    }
    if (st != LM_OK) {
        lm_loaded_model_close(m);
        return st;
    }
    return finish_open(m, threads, err);
}

void lm_loaded_model_close(lm_loaded_model *m) {
    if (m->model_loaded) lm_qwen35_free(&m->model);
    lm_checkpoint_close(m->checkpoint);
    lm_backend_destroy(m->backend);
    memset(m, 0, sizeof *m);
}
