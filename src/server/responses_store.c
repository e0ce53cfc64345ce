#include "server/responses_store.h"

#include <pthread.h>
#include <stdio.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

/* The schema's version (PRAGMA user_version): a file of another is refused
 * rather than read wrongly. */
#define SCHEMA_VERSION 1

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS responses ("
    " seq INTEGER PRIMARY KEY," /* insertion order: the oldest go first */
    " id TEXT NOT NULL UNIQUE,"
    " created_at INTEGER NOT NULL,"
    " stored_at INTEGER NOT NULL,"
    " bytes INTEGER NOT NULL,"
    " response TEXT NOT NULL,"
    " input TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS responses_stored_at ON responses(stored_at);";

enum { ST_INSERT, ST_DELETE_ID, ST_SELECT, ST_EXPIRE, ST_EVICT, ST_COUNT };
static const char *const statements[ST_COUNT] = {
    [ST_INSERT] = "INSERT INTO responses (id, created_at, stored_at, bytes, response, input) VALUES (?, ?, ?, ?, ?, ?)",
    [ST_DELETE_ID] = "DELETE FROM responses WHERE id = ? RETURNING bytes",
    [ST_SELECT] = "SELECT response, input FROM responses WHERE id = ? AND stored_at >= ?",
    [ST_EXPIRE] = "DELETE FROM responses WHERE stored_at < ? RETURNING bytes",
    [ST_EVICT] = "DELETE FROM responses WHERE seq = (SELECT MIN(seq) FROM responses) RETURNING bytes",
};

struct lm_responses_store {
    pthread_mutex_t mutex; /* one connection, one caller at a time */
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    lm_responses_store_options bounds;
    char where[160]; /* "the responses store FILE" or "the in-memory responses store", for messages */
    int count;       /* kept now, and their bytes (read at open, then kept up to date) */
    int64_t bytes;
};

static lm_status db_fail(lm_responses_store *s, lm_error *err, const char *doing) {
    int code = sqlite3_extended_errcode(s->db);
    lm_status st = (code & 0xff) == SQLITE_NOMEM ? LM_ERR_NOMEM : LM_ERR_IO;
    return lm_fail(err, st, "%s: %s: %s", s->where, doing, sqlite3_errmsg(s->db));
}

/* Runs a DELETE ... RETURNING bytes to its end, taking what it removed off
 * the totals. */
static lm_status run_delete(lm_responses_store *s, sqlite3_stmt *st, int *removed, lm_error *err) {
    int rc, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        s->count--;
        s->bytes -= sqlite3_column_int64(st, 0);
        n++;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (removed) *removed = n;
    return rc == SQLITE_DONE ? LM_OK : db_fail(s, err, "removing responses");
}

static lm_status exec(lm_responses_store *s, const char *sql, lm_error *err) {
    return sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK ? LM_OK : db_fail(s, err, sql);
}

/* One integer a statement's first row holds (a PRAGMA, a count). */
static lm_status query_int64(lm_responses_store *s, const char *sql, int64_t *out, lm_error *err) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(s, err, sql);
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? LM_OK : db_fail(s, err, sql);
}

/* The schema made or checked, the statements prepared, the totals read. */
static lm_status set_up(lm_responses_store *s, bool on_disk, lm_error *err) {
    sqlite3_busy_timeout(s->db, 2000); /* another process's lock: wait a little, then fail */
    int64_t version = 0;
    lm_status st = query_int64(s, "PRAGMA user_version", &version, err);
    if (st != LM_OK) return st;
    if (version != 0 && version != SCHEMA_VERSION)
        return lm_fail(err, LM_ERR_FORMAT, "%s was written with schema version %lld; this loom reads version %d",
                       s->where, (long long)version, SCHEMA_VERSION);
    if (on_disk && sqlite3_db_readonly(s->db, "main") == 1)
        return lm_fail(err, LM_ERR_IO, "%s is read-only: loom writes the responses it keeps there", s->where);
    if (on_disk) {
        /* WAL: a reader never waits on the writer; NORMAL: a commit is not
         * an fsync (a crash may lose the last responses, never the file). */
        sqlite3_stmt *wal = NULL;
        if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=WAL", -1, &wal, NULL) != SQLITE_OK)
            return db_fail(s, err, "setting WAL mode");
        int rc = sqlite3_step(wal);
        bool ok = rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(wal, 0), "wal") == 0;
        sqlite3_finalize(wal);
        if (!ok) return db_fail(s, err, "setting WAL mode");
        if ((st = exec(s, "PRAGMA synchronous=NORMAL", err)) != LM_OK) return st;
    }
    if ((st = exec(s, schema, err)) != LM_OK) return st;
    if (version == 0 && (st = exec(s, "PRAGMA user_version=1", err)) != LM_OK) return st;
    for (int i = 0; i < ST_COUNT; i++)
        if (sqlite3_prepare_v3(s->db, statements[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL) != SQLITE_OK)
            return db_fail(s, err, "preparing its statements");
    int64_t count = 0;
    if ((st = query_int64(s, "SELECT COUNT(*) FROM responses", &count, err)) != LM_OK) return st;
    if ((st = query_int64(s, "SELECT COALESCE(SUM(bytes), 0) FROM responses", &s->bytes, err)) != LM_OK) return st;
    s->count = (int)count;
    return LM_OK;
}

lm_status lm_responses_store_open(const lm_responses_store_options *options, lm_responses_store **out,
                                  lm_error *err) {
    *out = NULL;
    lm_responses_store *s = calloc(1, sizeof *s);
    if (!s) return lm_fail(err, LM_ERR_NOMEM, "out of memory opening the responses store");
    const char *path = options && options->path && options->path[0] ? options->path : NULL;
    s->bounds = (lm_responses_store_options){
        .path = path,
        .max_responses = options && options->max_responses > 0 ? options->max_responses : LM_RESPONSES_STORE_DEFAULT_MAX,
        .max_bytes = options && options->max_bytes > 0 ? options->max_bytes : LM_RESPONSES_STORE_DEFAULT_MAX_BYTES,
        .ttl_s = options && options->ttl_s > 0 ? options->ttl_s : LM_RESPONSES_STORE_DEFAULT_TTL_S};
    if (path) snprintf(s->where, sizeof s->where, "the responses store %.120s", path);
    else snprintf(s->where, sizeof s->where, "the in-memory responses store");
    pthread_mutex_init(&s->mutex, NULL);
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_PRIVATECACHE;
    int rc = sqlite3_open_v2(path ? path : ":memory:", &s->db, flags, NULL);
    lm_status st;
    if (rc != SQLITE_OK) {
        st = s->db ? db_fail(s, err, "opening it") : lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", s->where);
    } else {
        st = set_up(s, path != NULL, err);
    }
    if (st != LM_OK) {
        lm_responses_store_close(s);
        return st;
    }
    *out = s;
    return LM_OK;
}

void lm_responses_store_close(lm_responses_store *s) {
    if (!s) return;
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
    sqlite3_close(s->db); /* every statement is finalized: this closes */
    pthread_mutex_destroy(&s->mutex);
    free(s);
}

/* The expired, then the oldest past the count or the bytes. */
static lm_status enforce_bounds(lm_responses_store *s, long long now, lm_error *err) {
    sqlite3_bind_int64(s->st[ST_EXPIRE], 1, (sqlite3_int64)(now - s->bounds.ttl_s));
    lm_status st = run_delete(s, s->st[ST_EXPIRE], NULL, err);
    while (st == LM_OK && s->count > 0 && (s->count > s->bounds.max_responses || s->bytes > s->bounds.max_bytes)) {
        int removed = 0;
        st = run_delete(s, s->st[ST_EVICT], &removed, err);
        if (st == LM_OK && removed == 0) break; /* the totals drifted from the table: it is empty */
    }
    return st;
}

static lm_status put_locked(lm_responses_store *s, const lm_stored_response *r, long long now, lm_error *err) {
    size_t id_len = strlen(r->id), response_len = strlen(r->response), input_len = strlen(r->input);
    int64_t bytes = (int64_t)(id_len + response_len + input_len);
    if (id_len == 0 || id_len > LM_RESPONSES_STORE_MAX_ID)
        return lm_fail(err, LM_ERR_INVALID, "%s: a response id must be 1 to %d bytes", s->where, LM_RESPONSES_STORE_MAX_ID);
    if (bytes > s->bounds.max_bytes)
        return lm_fail(err, LM_ERR_NOMEM, "%s: response %s is %lld bytes, more than the store holds (%lld)", s->where,
                       r->id, (long long)bytes, (long long)s->bounds.max_bytes);
    lm_status st = exec(s, "BEGIN IMMEDIATE", err);
    if (st != LM_OK) return st;
    sqlite3_stmt *del = s->st[ST_DELETE_ID];
    sqlite3_bind_text(del, 1, r->id, (int)id_len, SQLITE_STATIC);
    st = run_delete(s, del, NULL, err);
    sqlite3_stmt *ins = s->st[ST_INSERT];
    if (st == LM_OK) {
        sqlite3_bind_text(ins, 1, r->id, (int)id_len, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 2, r->created_at);
        sqlite3_bind_int64(ins, 3, now);
        sqlite3_bind_int64(ins, 4, bytes);
        sqlite3_bind_text64(ins, 5, r->response, response_len, SQLITE_STATIC, SQLITE_UTF8);
        sqlite3_bind_text64(ins, 6, r->input, input_len, SQLITE_STATIC, SQLITE_UTF8);
        int rc = sqlite3_step(ins);
        sqlite3_reset(ins);
        sqlite3_clear_bindings(ins);
        if (rc == SQLITE_DONE) {
            s->count++;
            s->bytes += bytes;
        } else {
            st = db_fail(s, err, "storing a response");
        }
    }
    if (st == LM_OK) st = enforce_bounds(s, now, err);
    if (st == LM_OK) st = exec(s, "COMMIT", err);
    if (st != LM_OK) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        /* The totals may have moved with the rolled-back statements. */
        int64_t count = 0;
        if (query_int64(s, "SELECT COUNT(*) FROM responses", &count, NULL) == LM_OK) s->count = (int)count;
        query_int64(s, "SELECT COALESCE(SUM(bytes), 0) FROM responses", &s->bytes, NULL);
    }
    return st;
}

lm_status lm_responses_store_put(lm_responses_store *s, const lm_stored_response *r, long long now, lm_error *err) {
    pthread_mutex_lock(&s->mutex);
    lm_status st = put_locked(s, r, now, err);
    pthread_mutex_unlock(&s->mutex);
    return st;
}

static char *column_copy(sqlite3_stmt *st, int col) {
    const unsigned char *text = sqlite3_column_text(st, col);
    int n = sqlite3_column_bytes(st, col);
    char *copy = text ? malloc((size_t)n + 1) : NULL;
    if (copy) {
        memcpy(copy, text, (size_t)n);
        copy[n] = 0;
    }
    return copy;
}

lm_status lm_responses_store_get(lm_responses_store *s, const char *id, long long now, bool *found, char **response,
                                 char **input, lm_error *err) {
    *found = false;
    *response = *input = NULL;
    pthread_mutex_lock(&s->mutex);
    sqlite3_stmt *st = s->st[ST_SELECT];
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)(now - s->bounds.ttl_s));
    int rc = sqlite3_step(st);
    lm_status status = LM_OK;
    if (rc == SQLITE_ROW) {
        *response = column_copy(st, 0);
        *input = column_copy(st, 1);
        if (!*response || !*input) {
            free(*response);
            free(*input);
            *response = *input = NULL;
            status = lm_fail(err, LM_ERR_NOMEM, "%s: out of memory reading response %.128s", s->where, id);
        } else {
            *found = true;
        }
    } else if (rc != SQLITE_DONE) {
        status = db_fail(s, err, "reading a response");
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    pthread_mutex_unlock(&s->mutex);
    return status;
}

lm_status lm_responses_store_delete(lm_responses_store *s, const char *id, bool *found, lm_error *err) {
    pthread_mutex_lock(&s->mutex);
    sqlite3_stmt *st = s->st[ST_DELETE_ID];
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int removed = 0;
    lm_status status = run_delete(s, st, &removed, err);
    pthread_mutex_unlock(&s->mutex);
    *found = removed > 0;
    return status;
}

void lm_responses_store_usage(lm_responses_store *s, int *count, int64_t *bytes) {
    pthread_mutex_lock(&s->mutex);
    *count = s->count;
    *bytes = s->bytes;
    pthread_mutex_unlock(&s->mutex);
}

void lm_responses_store_bounds(const lm_responses_store *s, lm_responses_store_options *out) { *out = s->bounds; }
