/* Number schemas: bounds as the schema writes them, multipleOf. */
#include "grammar/json_schema_compiler.h"

#include <math.h>

#include "grammar/json_number.h"

/* ---- numbers */

lm_status lm_js_number_schema(json_builder *j, const cJSON *schema, bool integer, lm_gseq *out) {
    const cJSON *min = get(schema, "minimum"), *max = get(schema, "maximum");
    const cJSON *xmin = get(schema, "exclusiveMinimum"), *xmax = get(schema, "exclusiveMaximum");
    const cJSON *mult = get(schema, "multipleOf");
    if (!min && !max && !xmin && !xmax && !mult) {
        ref(out, integer ? j->integer : j->number);
        return LM_OK;
    }
    char lo[LM_NUMBER_MAX_TEXT], hi[LM_NUMBER_MAX_TEXT];
    lm_number_bounds nb = {.integer = integer};
    for (int side = 0; side < 2; side++) {
        const cJSON *bound = side ? max : min, *ex = side ? xmax : xmin;
        const char *name = side ? "maximum" : "minimum";
        bool exclusive = false;
        if (bound && !cJSON_IsNumber(bound)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a number", name);
        if (ex && cJSON_IsBool(ex)) { /* draft 4: a flag on the bound */
            if (!j->draft4)
                return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                               "JSON schema: a boolean '%s' (draft 4) without \"$schema\" naming draft 4 is not supported",
                               side ? "exclusiveMaximum" : "exclusiveMinimum");
            exclusive = cJSON_IsTrue(ex);
            ex = NULL;
        } else if (ex && !cJSON_IsNumber(ex)) {
            return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a number", side ? "exclusiveMaximum" : "exclusiveMinimum");
        }
        /* the tighter of the bound and the exclusive bound */
        if (ex && (!bound || (side ? ex->valuedouble <= bound->valuedouble : ex->valuedouble >= bound->valuedouble))) {
            bound = ex;
            exclusive = true;
        }
        if (!bound) continue;
        lm_js_number_text(bound, side ? hi : lo, LM_NUMBER_MAX_TEXT);
        if (side) nb.max = hi, nb.max_exclusive = exclusive;
        else nb.min = lo, nb.min_exclusive = exclusive;
    }
    if (mult) {
        double m = cJSON_IsNumber(mult) ? mult->valuedouble : 0;
        if (!(m > 0)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'multipleOf' must be a number above 0");
        if (m != floor(m)) return unsupported(j, "multipleOf (a fraction)");
        if (m > LM_NUMBER_MAX_MULTIPLE)
            return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: 'multipleOf' above %d is not supported", LM_NUMBER_MAX_MULTIPLE);
        nb.multiple = (unsigned)m;
    }
    return lm_json_number(j->b, &nb, out, j->err);
}
