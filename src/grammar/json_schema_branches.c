/* anyOf and oneOf (a oneOf branch generated where no other can match it) and not. */
#include "grammar/json_schema_compiler.h"

#include <stdlib.h>

#include "grammar/cost.h"
#include "grammar/json_schema_merge.h"

/* ---- oneOf: exact where its branches cannot both match */

static unsigned values_types(const cJSON *schema, bool *has_values) {
    const cJSON *e = get(schema, "enum"), *c = get(schema, "const");
    *has_values = e || c;
    if (c) return lm_json_value_type(c);
    unsigned m = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, e) m |= lm_json_value_type(v);
    return e ? m : LM_JT_ALL;
}

static unsigned possible_types(const cJSON *s) {
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? LM_JT_ALL : 0;
    unsigned m = LM_JT_ALL;
    if (!lm_schema_type_mask(get(s, "type"), &m)) m = LM_JT_ALL;
    bool has;
    return m & values_types(s, &has);
}

static bool values_disjoint(const cJSON *x, const cJSON *y) {
    bool hx, hy;
    values_types(x, &hx);
    values_types(y, &hy);
    if (!hx || !hy) return false;
    const cJSON *vx = get(x, "enum") ? get(x, "enum") : get(x, "const");
    const cJSON *vy = get(y, "enum") ? get(y, "enum") : get(y, "const");
    bool lx = get(x, "enum") != NULL, ly = get(y, "enum") != NULL;
    const cJSON *a = lx ? vx->child : vx;
    for (; a; a = lx ? a->next : NULL) {
        const cJSON *b = ly ? vy->child : vy;
        for (; b; b = ly ? b->next : NULL)
            if (cJSON_Compare(a, b, true)) return false;
    }
    return true;
}

static bool requires(const cJSON *s, const char *name) {
    const cJSON *r;
    cJSON_ArrayForEach(r, get(s, "required")) if (cJSON_IsString(r) && strcmp(r->valuestring, name) == 0) return true;
    return false;
}

/* x's objects need a property that y's cannot have */
static bool excludes(const cJSON *x, const cJSON *y) {
    if (!cJSON_IsFalse(get(y, "additionalProperties")) || get(y, "patternProperties")) return false;
    const cJSON *r;
    cJSON_ArrayForEach(r, get(x, "required")) if (cJSON_IsString(r) && !get(get(y, "properties"), r->valuestring)) return true;
    return false;
}



/* x's listed string values all fail y's pattern (y a string schema of a pattern) */
static lm_status values_fail_pattern(json_builder *j, const cJSON *x, const cJSON *y, bool *out) {
    const cJSON *pattern = get(y, "pattern"), *e = get(x, "enum"), *c = get(x, "const");
    *out = false;
    if (!cJSON_IsString(pattern) || (!e && !c)) return LM_OK;
    const cJSON *v = c ? c : e->child;
    for (; v; v = c ? NULL : v->next) {
        if (!cJSON_IsString(v)) continue; /* other types: y's accepted types decide */
        bool hit = false;
        TRY(lm_js_pattern_matches(j, pattern->valuestring, v->valuestring, &hit));
        if (hit) return LM_OK;
    }
    *out = true;
    return LM_OK;
}

/* Whether no instance x's grammar generates can match y. */
static lm_status disjoint(json_builder *j, const cJSON *x, const cJSON *y, bool *out) {
    TRY(lm_js_normalize_through(j, x, &x));
    TRY(lm_js_normalize_through(j, y, &y));
    *out = true;
    unsigned gen = cJSON_IsObject(x) ? lm_js_implied_types(x) & possible_types(x) : possible_types(x);
    if (!(gen & possible_types(y))) return LM_OK;
    if (cJSON_IsObject(x) && cJSON_IsObject(y) && !(gen & possible_types(y) & ~LM_JT_STRING)) {
        bool apart = false;
        TRY(values_fail_pattern(j, x, y, &apart));
        if (apart) return LM_OK;
    }
    if (!cJSON_IsObject(x) || !cJSON_IsObject(y)) {
        *out = false;
        return LM_OK;
    }
    if (values_disjoint(x, y)) return LM_OK;
    if ((possible_types(x) & possible_types(y)) == LM_JT_OBJECT) {
        if (excludes(x, y) || excludes(y, x)) return LM_OK;
        /* a discriminator: a property both require, of values apart */
        const cJSON *p;
        cJSON_ArrayForEach(p, get(x, "properties")) {
            const cJSON *q = get(get(y, "properties"), p->string);
            if (!q || !requires(x, p->string) || !requires(y, p->string)) continue;
            const cJSON *px, *qy;
            TRY(lm_js_normalize_through(j, p, &px));
            TRY(lm_js_normalize_through(j, q, &qy));
            if (cJSON_IsObject(px) && cJSON_IsObject(qy) &&
                (values_disjoint(px, qy) || !(possible_types(px) & possible_types(qy))))
                return LM_OK;
        }
    }
    *out = false;
    return LM_OK;
}


lm_status lm_js_branches_schema(json_builder *j, const cJSON *schema, const char *word, lm_gseq *out, int depth) {
    const cJSON *list = get(schema, word);
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a non-empty array", word);
    if (cJSON_GetArraySize(list) > LM_SCHEMA_MAX_REFS)
        return lm_fail(j->err, LM_ERR_NOMEM, "JSON schema: '%s' of more than %d branches", word, LM_SCHEMA_MAX_REFS);
    const cJSON *siblings = NULL;
    TRY(lm_js_without(j, schema, word, &siblings));
    bool beside = lm_js_has_assertions(siblings, (const char *const[]){NULL});
    int n = cJSON_GetArraySize(list);
    const cJSON **branch = calloc((size_t)n, sizeof *branch);
    if (!branch) return nomem(j);
    lm_status st = LM_OK;
    int m = 0;
    const cJSON *item;
    const cJSON **own_branch = calloc((size_t)n, sizeof *own_branch);
    if (!own_branch) {
        free(branch);
        return nomem(j);
    }
    cJSON_ArrayForEach(item, list) {
        if (st != LM_OK) break;
        if (cJSON_IsFalse(item)) continue; /* matches nothing: never taken */
        const cJSON *b = item;
        if (beside) st = lm_js_merged_scoped(j, siblings, item, LM_JS_OWNER_A, &b);
        if (st == LM_OK) st = lm_js_normalize(j, b, &b);
        if (st == LM_OK && cJSON_IsFalse(b)) continue; /* the branch and its siblings leave nothing */
        own_branch[m] = item;
        branch[m++] = b;
    }
    /* a branch narrowed by the complements of others (json_schema_not.c)
     * would count their properties as evaluated: not beside unevaluated* */
    bool may_negate = !lm_js_unevaluated_asserts(siblings);
    /* oneOf: exactly one branch must match.  A branch is generated only
     * where what it generates can match no other branch (of them all,
     * generated or not): exact where the branches are apart, narrower
     * where some overlap, refused where every branch overlaps another. */
    if (st == LM_OK && strcmp(word, "oneOf") == 0 && m > LM_SCHEMA_MAX_ONEOF)
        st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: 'oneOf' of more than %d branches is not supported",
                     LM_SCHEMA_MAX_ONEOF);
    if (st == LM_OK && strcmp(word, "oneOf") == 0) {
        int kept = 0, first_x = -1, first_y = -1;
        const cJSON *all[LM_SCHEMA_MAX_REFS];
        for (int x = 0; x < m; x++) all[x] = branch[x];
        for (int x = 0; x < m && st == LM_OK; x++) {
            bool alone = true;
            if (j->deadline && lm_grammar_now_ns() > j->deadline)
                st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: comparing the branches of a 'oneOf' took more than %d ms",
                             LM_GRAMMAR_COMPILE_MS);
            const cJSON *mine = all[x];
            for (int y = 0; y < m && st == LM_OK && alone; y++) {
                if (y == x) continue;
                bool apart = false;
                st = disjoint(j, mine, all[y], &apart);
                if (st == LM_OK && !apart && may_negate) {
                    /* x where y fails: x and the complement of y, where it has a bounded form */
                    const cJSON *neg = NULL;
                    bool found = false;
                    st = lm_js_negation(j, own_branch[y], &neg, &found);
                    if (st == LM_OK && found) st = lm_js_merged(j, mine, neg, &mine);
                    if (st == LM_ERR_UNSUPPORTED) { /* no intersection loom can write: x is left out */
                        st = LM_OK;
                        found = false;
                    }
                    apart = found && st == LM_OK && !cJSON_IsFalse(mine);
                }
                if (st == LM_OK && !apart) {
                    alone = false;
                    if (first_x < 0) first_x = x, first_y = y;
                }
            }
            if (st == LM_OK && alone) branch[kept++] = mine;
        }
        if (st == LM_OK && kept == 0 && m > 0)
            st = lm_fail(j->err, LM_ERR_UNSUPPORTED,
                         "JSON schema: 'oneOf' whose branches all may match another (%d and %d) is not supported "
                         "(branches apart by type, const/enum values or a required discriminator property are)",
                         first_x < first_y ? first_x : first_y, first_x < first_y ? first_y : first_x);
        m = kept;
    }
    uint32_t rule = 0;
    if (st == LM_OK && m == 0)
        st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '%s' of false branches only, so nothing matches", word);
    if (st == LM_OK) st = lm_grammar_new_rule(j->b, &rule, j->err);
    int alts = 0;
    for (int i = 0; i < m && st == LM_OK; i++) {
        lm_gseq s = {0};
        /* what the branch's compile adds to the builder, taken back where it has no instance */
        uint32_t rules = j->b->n_rules, alts_before = j->b->n_alts, elems = j->b->n_elems;
        int refs = j->n_refs;
        bool have_value = j->have_value;
        st = lm_js_compile_schema(j, branch[i], &s, depth + 1);
        if ((st == LM_ERR_UNSUPPORTED || st == LM_ERR_INVALID) && strstr(j->err->message, "so nothing matches") &&
            (alts || i + 1 < m)) {
            st = LM_OK; /* a branch with no instance (an empty number range, say): never taken */
            lm_gseq_free(&s);
            j->b->n_rules = rules, j->b->n_alts = alts_before, j->b->n_elems = elems;
            j->n_refs = refs;
            j->have_value = have_value;
            continue;
        }
        if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        alts += st == LM_OK;
        lm_gseq_free(&s);
    }
    if (st == LM_OK && !alts)
        st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '%s' whose branches all match nothing, so nothing matches", word);
    free(branch);
    free(own_branch);
    if (st == LM_OK) ref(out, rule);
    return st;
}
