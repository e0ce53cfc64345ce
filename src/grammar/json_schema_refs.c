/* $ref as JSON Schema 2020-12 resolves it, within the one document: every
 * subschema's base URI (its nearest $id, resolved against the one above),
 * the resources ($id) and anchors ($anchor, $dynamicAnchor) registered by
 * URI, and a $ref resolved against the base URI where it stands (RFC 3986
 * reference resolution), then its fragment: empty, a JSON pointer from that
 * resource, or an anchor's name.  A $dynamicRef is one too, but where its
 * target is a $dynamicAnchor of that name: then the dynamic scope's (see
 * dynamic_target).  A reference to another document (remote,
 * or a URI no $id here names) is refused by name: loom fetches nothing. */
#include "grammar/json_schema_compiler.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- URIs (RFC 3986, section 5.2: enough for schema identifiers) */

static bool has_scheme(const char *s) {
    if (!isalpha((unsigned char)*s)) return false;
    for (s++; *s && *s != ':'; s++)
        if (!isalnum((unsigned char)*s) && *s != '+' && *s != '-' && *s != '.') return false;
    return *s == ':';
}

/* the end of "scheme://authority" (or of "scheme:") in an absolute URI */
static size_t authority_end(const char *uri) {
    const char *colon = strchr(uri, ':');
    if (!colon) return 0;
    const char *p = colon + 1;
    if (p[0] == '/' && p[1] == '/') {
        p += 2;
        while (*p && *p != '/' && *p != '?' && *p != '#') p++;
    }
    return (size_t)(p - uri);
}

/* path with its "." and ".." segments removed, in place */
static void remove_dots(char *path) {
    char *out = path, *in = path;
    while (*in) {
        if (strncmp(in, "../", 3) == 0) in += 3;
        else if (strncmp(in, "./", 2) == 0) in += 2;
        else if (strncmp(in, "/./", 3) == 0) in += 2;
        else if (strcmp(in, "/.") == 0) in[1] = 0;
        else if (strncmp(in, "/../", 4) == 0 || strcmp(in, "/..") == 0) {
            in += 3;
            if (!*in) *--in = '/';
            while (out > path && *--out != '/') {}
            *out = 0;
        } else if (strcmp(in, ".") == 0 || strcmp(in, "..") == 0) {
            in += strlen(in);
        } else {
            if (*in == '/') *out++ = *in++;
            while (*in && *in != '/') *out++ = *in++;
        }
    }
    *out = 0;
}

/* ref resolved against base, its fragment kept (malloc'd; NULL: out of memory) */
static char *resolve_uri(const char *base, const char *ref) {
    size_t nb = strlen(base), nr = strlen(ref);
    char *out = malloc(nb + nr + 3);
    if (!out) return NULL;
    const char *hash = strchr(base, '#'), *ref_hash = strchr(ref, '#');
    size_t base_len = hash ? (size_t)(hash - base) : nb, ref_len = ref_hash ? (size_t)(ref_hash - ref) : nr;
    size_t n = 0;
    if (ref_len && has_scheme(ref)) {
        memcpy(out, ref, ref_len);
        n = ref_len;
    } else if (ref_len == 0) {
        memcpy(out, base, base_len);
        n = base_len;
    } else {
        size_t root = has_scheme(base) ? authority_end(base) : 0, keep;
        if (ref[0] == '/' && ref[1] == '/') keep = has_scheme(base) ? (size_t)(strchr(base, ':') - base) + 1 : 0;
        else if (ref[0] == '/') keep = root;
        else { /* merged with the base's folder */
            keep = base_len;
            while (keep > root && base[keep - 1] != '/') keep--;
        }
        memcpy(out, base, keep);
        n = keep;
        /* "http://host" + "x": "http://host/x" */
        if (ref[0] != '/' && keep == root && root > 2 && base[root - 1] != ':' && strstr(base, "//")) out[n++] = '/';
        memcpy(out + n, ref, ref_len);
        n += ref_len;
    }
    out[n] = 0;
    if (strncmp(out, "urn:", 4) != 0) remove_dots(out + (has_scheme(out) ? authority_end(out) : 0));
    if (ref_hash) strcat(out, ref_hash);
    return out;
}

/* ---- the registry */

static lm_status add_resource(json_builder *j, char *uri, const cJSON *node, bool dynamic) {
    if (!uri) return nomem(j);
    for (int i = 0; i < j->n_resources; i++)
        if (strcmp(j->resources[i].uri, uri) == 0) { /* the first wins (a duplicate is the schema's mistake) */
            free(uri);
            return LM_OK;
        }
    if (j->n_resources >= LM_SCHEMA_MAX_REFS) {
        free(uri);
        return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: more than %d $id / $anchor", LM_SCHEMA_MAX_REFS);
    }
    j->resources[j->n_resources++] = (schema_resource){uri, node, dynamic};
    return LM_OK;
}

static lm_status add_ref_base(json_builder *j, const char *text, const char *base, bool dynamic) {
    if (j->n_ref_bases >= LM_SCHEMA_MAX_REFS)
        return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: more than %d $ref below an $id", LM_SCHEMA_MAX_REFS);
    char *copy = strdup(base);
    if (!copy) return nomem(j);
    j->ref_bases[j->n_ref_bases++] = (ref_base){text, copy, dynamic};
    return LM_OK;
}

/* values, not schemas: an "$id" in them identifies nothing */
static bool holds_values(const char *key) {
    return key && (strcmp(key, "enum") == 0 || strcmp(key, "const") == 0 || strcmp(key, "examples") == 0 ||
                   strcmp(key, "default") == 0);
}

static lm_status register_node(json_builder *j, const cJSON *node, const char *base, int depth) {
    if (depth > 4 * LM_SCHEMA_MAX_DEPTH)
        return lm_fail(j->err, LM_ERR_NOMEM, "JSON schema nested deeper than %d", 4 * LM_SCHEMA_MAX_DEPTH);
    char *mine = NULL;
    lm_status st = LM_OK;
    if (cJSON_IsObject(node)) {
        const cJSON *id = get(node, "$id");
        /* draft 4 names a resource "id", and its "$id" is no keyword: references stay the document's */
        if (cJSON_IsString(id) && id->valuestring[0] != '#' && !j->draft4) {
            mine = resolve_uri(base, id->valuestring);
            if (!mine) return nomem(j);
            char *hash = strchr(mine, '#');
            if (hash) *hash = 0; /* "$id": "x#" names x */
            st = add_resource(j, strdup(mine), node, false);
            base = mine;
        }
        const char *const anchors[] = {"$anchor", "$dynamicAnchor"};
        for (int a = 0; a < 2 && st == LM_OK; a++) {
            const cJSON *name = get(node, anchors[a]);
            if (!cJSON_IsString(name)) continue;
            size_t n = strlen(base) + strlen(name->valuestring) + 2;
            char *uri = malloc(n);
            if (uri) snprintf(uri, n, "%s#%s", base, name->valuestring);
            st = add_resource(j, uri, node, a == 1);
        }
        const char *const refs[] = {"$ref", "$dynamicRef"};
        for (int r = 0; r < 2 && st == LM_OK; r++) {
            const cJSON *ref = get(node, refs[r]);
            /* the document's own base ("") is what an unlisted $ref gets: listed are the others */
            if (cJSON_IsString(ref) && (base[0] || r == 1)) st = add_ref_base(j, ref->valuestring, base, r == 1);
        }
    }
    if (cJSON_IsObject(node) || cJSON_IsArray(node))
        for (const cJSON *c = node->child; c && st == LM_OK; c = c->next)
            if (!(cJSON_IsObject(node) && holds_values(c->string)) && (cJSON_IsObject(c) || cJSON_IsArray(c)))
                st = register_node(j, c, base, depth + 1);
    free(mine);
    return st;
}

lm_status lm_js_register_resources(json_builder *j) {
    j->resources = calloc(LM_SCHEMA_MAX_REFS, sizeof *j->resources);
    j->ref_bases = calloc(LM_SCHEMA_MAX_REFS, sizeof *j->ref_bases);
    if (!j->resources || !j->ref_bases) return nomem(j);
    j->owns_resources = true;
    TRY(add_resource(j, strdup(""), j->root, false));
    return register_node(j, j->root, "", 0);
}

void lm_js_free_resources(json_builder *j) {
    if (!j->owns_resources) return;
    for (int i = 0; i < j->n_resources; i++) free(j->resources[i].uri);
    for (int i = 0; i < j->n_ref_bases; i++) free(j->ref_bases[i].base);
    free(j->resources);
    free(j->ref_bases);
}

/* ---- resolving */

static const ref_base *ref_site(const json_builder *j, const char *text) {
    for (int i = 0; i < j->n_ref_bases; i++)
        if (j->ref_bases[i].text == text) return &j->ref_bases[i];
    return NULL;
}

static const char *base_of(const json_builder *j, const char *text) {
    const ref_base *r = ref_site(j, text);
    return r ? r->base : "";
}

static const schema_resource *resource_entry(const json_builder *j, const char *uri) {
    for (int i = 0; i < j->n_resources; i++)
        if (strcmp(j->resources[i].uri, uri) == 0) return &j->resources[i];
    return NULL;
}

static const cJSON *resource(const json_builder *j, const char *uri) {
    const schema_resource *r = resource_entry(j, uri);
    return r ? r->node : NULL;
}

/* $dynamicRef "...#name" whose first target has "$dynamicAnchor": "name":
 * the outermost resource of the dynamic scope with that dynamic anchor.
 * The scope starts at the document's root, so where the root resource has
 * one it is that; where the document has one only, it is the first target;
 * otherwise the answer depends on the path taken, which one grammar rule
 * per target cannot follow: refused. */
static lm_status dynamic_target(json_builder *j, const char *name, const char *path, const cJSON **target) {
    const cJSON *root_id = get(j->root, "$id");
    /* the root's own $id is the registry's second entry (register_node) */
    const char *root_base = cJSON_IsString(root_id) && root_id->valuestring[0] != '#' ? j->resources[1].uri : "";
    const cJSON *root_hit = NULL, *only = NULL;
    int count = 0;
    for (int i = 0; i < j->n_resources; i++) {
        const char *hash = strrchr(j->resources[i].uri, '#');
        if (!j->resources[i].dynamic || !hash || strcmp(hash + 1, name) != 0) continue;
        count++;
        only = j->resources[i].node;
        if (strncmp(j->resources[i].uri, root_base, (size_t)(hash - j->resources[i].uri)) == 0 &&
            strlen(root_base) == (size_t)(hash - j->resources[i].uri))
            root_hit = j->resources[i].node;
    }
    if (root_hit) *target = root_hit;
    else if (count == 1) *target = only;
    else
        return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                       "JSON schema: '$dynamicRef' to '%.200s', which several $dynamicAnchor could answer by the path taken, is not supported", path);
    return LM_OK;
}

/* a JSON pointer (after '#', percent-escapes decoded) from at */
static lm_status follow_pointer(json_builder *j, const cJSON *at, const char *p, const char *path, const cJSON **target) {
    char name[256];
    while (at && *p == '/') {
        p++;
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && p[1] == '1') c = '/', p++;
            else if (c == '~' && p[1] == '0') c = '~', p++;
            else if (c == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) { /* a URI's escape */
                char hex[3] = {p[1], p[2], 0};
                c = (char)strtol(hex, NULL, 16);
                p += 2;
            }
            if (n + 1 >= sizeof name)
                return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '$ref' to '%.200s': a name too long", path);
            name[n++] = c;
        }
        name[n] = 0;
        if (cJSON_IsArray(at)) {
            char *end = NULL;
            long i = strtol(name, &end, 10);
            at = end && !*end ? cJSON_GetArrayItem(at, (int)i) : NULL;
        } else {
            at = cJSON_GetObjectItemCaseSensitive(at, name);
        }
    }
    if (!at || *p) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '$ref' names '%.200s', which is not defined", path);
    *target = at;
    return LM_OK;
}

lm_status lm_js_resolve_ref(json_builder *j, const cJSON *refp, const cJSON **target) {
    if (!cJSON_IsString(refp)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '$ref' must be a string");
    const char *path = refp->valuestring;
    if (!j->resources) { /* no registry (lm_json_grammar's callers): within the document only */
        if (path[0] != '#')
            return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '$ref' to '%.200s' is not supported", path);
        return follow_pointer(j, j->root, path + 1, path, target);
    }
    char *uri = resolve_uri(base_of(j, path), path);
    if (!uri) return nomem(j);
    char *hash = strchr(uri, '#');
    const char *fragment = hash ? hash + 1 : "";
    if (hash) *hash = 0;
    const cJSON *doc = resource(j, uri);
    lm_status st = LM_OK;
    if (!doc) {
        st = lm_fail(j->err, LM_ERR_UNSUPPORTED,
                     "JSON schema: '$ref' to '%.200s' is not supported (another document: only references within the schema are)", path);
    } else if (!*fragment) {
        *target = doc;
    } else if (*fragment == '/') {
        st = follow_pointer(j, doc, fragment, path, target);
    } else {
        *hash = '#';
        const schema_resource *anchored = resource_entry(j, uri);
        const ref_base *site = ref_site(j, path);
        if (!anchored) st = lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '$ref' names the anchor '%.200s', which is not defined", path);
        else if (site && site->dynamic && anchored->dynamic) st = dynamic_target(j, fragment, path, target);
        else *target = anchored->node;
    }
    free(uri);
    return st;
}
