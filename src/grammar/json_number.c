/* Bounded JSON numbers (grammar/json_number.h). */
#include "grammar/json_number.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A bound's magnitude as plain decimal digits: digits[0 .. int_len) the
 * integer part ("0" when below 1), then the fraction, trailing zeros cut. */
typedef struct {
    bool negative, zero;
    char digits[2 * LM_NUMBER_MAX_TEXT];
    int n_digits, int_len, significant;
} decimal;

static lm_status parse_decimal(const char *text, decimal *d, lm_error *err) {
    memset(d, 0, sizeof *d);
    const char *p = text;
    if (*p == '-') d->negative = true, p++;
    char mant[LM_NUMBER_MAX_TEXT];
    int n = 0, point = -1;
    for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) {
        if (*p == '.') {
            point = n;
            continue;
        }
        if (n >= LM_NUMBER_MAX_TEXT - 1) return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: the bound %.40s has too many digits", text);
        mant[n++] = *p;
    }
    long exp10 = 0;
    if (*p == 'e' || *p == 'E') exp10 = strtol(p + 1, NULL, 10);
    if (point < 0) point = n;
    /* the decimal point sits after `point + exp10` mantissa digits */
    long int_digits = point + exp10;
    if (int_digits > LM_NUMBER_MAX_TEXT - 10 || int_digits < -(LM_NUMBER_MAX_TEXT - 10) - n)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: the bound %.40s is out of range", text);
    char plain[2 * LM_NUMBER_MAX_TEXT];
    int m = 0;
    long int_len = int_digits > 0 ? int_digits : 0;
    for (long k = 0; k < int_len; k++) plain[m++] = k < n ? mant[k] : '0';
    for (long k = int_len > 0 ? int_len : int_digits; k < n; k++) plain[m++] = k < 0 ? '0' : mant[k];
    /* strip the integer part's leading zeros, keep one */
    int lead = 0;
    while (lead < int_len - 1 && plain[lead] == '0') lead++;
    if (int_len == 0) {
        d->digits[d->n_digits++] = '0';
        d->int_len = 1;
    } else {
        d->int_len = (int)(int_len - lead);
    }
    for (int k = lead; k < m; k++) d->digits[d->n_digits++] = plain[k];
    while (d->n_digits > d->int_len && d->digits[d->n_digits - 1] == '0') d->n_digits--;
    int first = 0, last = d->n_digits - 1;
    while (first < d->n_digits && d->digits[first] == '0') first++;
    while (last >= first && d->digits[last] == '0') last--;
    d->zero = first == d->n_digits;
    d->significant = d->zero ? 0 : last - first + 1;
    return LM_OK;
}

/* A bound as a validator reads it: a number written with a fraction or an
 * exponent is a double, compared exactly with an integer answer, so from
 * 2^53 on (where the double's digits differ from the text's) the double's
 * own integer digits are the bound. */
static lm_status read_bound(const char *text, bool exclusive, decimal *d, lm_error *err) {
    bool written_float = strpbrk(text, ".eE") != NULL;
    double v = strtod(text, NULL);
    if (written_float && isfinite(v) && fabs(v) >= 9007199254740992.0) {
        char exact[LM_NUMBER_MAX_TEXT];
        snprintf(exact, sizeof exact, "%.0f", v);
        lm_status st = parse_decimal(exact, d, err);
        if (st != LM_OK) return st;
    } else {
        lm_status st = parse_decimal(text, d, err);
        if (st != LM_OK) return st;
    }
    if (exclusive && d->significant > LM_NUMBER_MAX_DIGITS)
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "JSON schema: an exclusive bound of more than %d significant digits (%.40s) is not supported",
                       LM_NUMBER_MAX_DIGITS, text);
    return LM_OK;
}

/* one side of a magnitude range */
typedef struct {
    bool present, exclusive;
    const decimal *d;
} side;

enum { FREE = 0, EQUAL = 1 };

typedef struct {
    lm_grammar_builder *b;
    lm_error *err;
    bool integer;
    unsigned multiple; /* 1: none */
    side lo, hi;
    /* memo: key -> rule + 1 (0: not made), NONE: matches nothing */
    uint64_t *keys;
    uint32_t *rules;
    uint32_t cap, n;
} number_builder;

#define NONE UINT32_MAX

static int frac_max(int n) { return n >= LM_NUMBER_MAX_DIGITS ? 0 : LM_NUMBER_MAX_DIGITS - n; }

static bool memo_get(number_builder *nb, uint64_t key, uint32_t *rule) {
    if (!nb->cap) return false;
    for (uint32_t i = (uint32_t)(key * 0x9E3779B97F4A7C15ull >> 40) & (nb->cap - 1);; i = (i + 1) & (nb->cap - 1)) {
        if (!nb->rules[i]) return false;
        if (nb->keys[i] == key) {
            *rule = nb->rules[i] == NONE ? NONE : nb->rules[i] - 1;
            return true;
        }
    }
}

static lm_status memo_put(number_builder *nb, uint64_t key, uint32_t rule) {
    if (2 * (nb->n + 1) > nb->cap) {
        uint32_t cap = nb->cap ? 2 * nb->cap : 256;
        uint64_t *keys = calloc(cap, sizeof *keys);
        uint32_t *rules = calloc(cap, sizeof *rules);
        if (!keys || !rules) {
            free(keys);
            free(rules);
            return lm_fail(nb->err, LM_ERR_NOMEM, "out of memory");
        }
        for (uint32_t i = 0; i < nb->cap; i++) {
            if (!nb->rules[i]) continue;
            uint32_t k = (uint32_t)(nb->keys[i] * 0x9E3779B97F4A7C15ull >> 40) & (cap - 1);
            while (rules[k]) k = (k + 1) & (cap - 1);
            keys[k] = nb->keys[i];
            rules[k] = nb->rules[i];
        }
        free(nb->keys);
        free(nb->rules);
        nb->keys = keys;
        nb->rules = rules;
        nb->cap = cap;
    }
    uint32_t i = (uint32_t)(key * 0x9E3779B97F4A7C15ull >> 40) & (nb->cap - 1);
    while (nb->rules[i]) i = (i + 1) & (nb->cap - 1);
    nb->keys[i] = key;
    nb->rules[i] = rule == NONE ? NONE : rule + 1;
    nb->n++;
    return LM_OK;
}

/* The bound's digit at position i ('0' past its end). */
static char digit_at(const decimal *d, int i) { return i < d->n_digits ? d->digits[i] : '0'; }
static bool rest_zero(const decimal *d, int i) {
    for (int k = i; k < d->n_digits; k++)
        if (d->digits[k] != '0') return false;
    return true;
}

/* Whether the number may end at position i (its digits so far equal to the
 * bound's where the state says EQUAL). */
static bool may_end(const number_builder *nb, int i, int lo, int hi, unsigned r) {
    if (r != 0) return false;
    if (lo == EQUAL && !(rest_zero(nb->lo.d, i) && !nb->lo.exclusive)) return false; /* below it, or equal */
    if (hi == EQUAL && rest_zero(nb->hi.d, i) && nb->hi.exclusive) return false;     /* equal to it */
    return true;
}

typedef struct {
    lm_gseq *alts;
    int n, cap;
} alt_list;

static lm_gseq *alt_new(alt_list *l) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        lm_gseq *a = realloc(l->alts, sizeof *a * (size_t)cap);
        if (!a) return NULL;
        l->alts = a;
        l->cap = cap;
    }
    memset(&l->alts[l->n], 0, sizeof l->alts[0]);
    return &l->alts[l->n++];
}

static void alt_free(alt_list *l) {
    for (int i = 0; i < l->n; i++) lm_gseq_free(&l->alts[i]);
    free(l->alts);
}

/* A rule of the alternatives (NONE when there are none); frees them. */
static lm_status rule_of_alts(number_builder *nb, alt_list *l, uint32_t *rule) {
    lm_status st = LM_OK;
    *rule = NONE;
    if (l->n) st = lm_grammar_new_rule(nb->b, rule, nb->err);
    for (int i = 0; i < l->n && st == LM_OK; i++) st = lm_grammar_add_alt(nb->b, *rule, &l->alts[i], nb->err);
    alt_free(l);
    return st;
}

static lm_status digit_elem(number_builder *nb, lm_gseq *s, int lo, int hi) {
    lm_byte_class c = {{0}};
    lm_byte_class_add_range(&c, (uint8_t)('0' + lo), (uint8_t)('0' + hi));
    return lm_gseq_class(nb->b, s, &c, nb->err);
}

/* The rest of a number of n integer digits from position i, the bounds'
 * states lo / hi, remainder r of the digits so far. */
static lm_status node(number_builder *nb, int n, int i, int lo, int hi, unsigned r, uint32_t *rule) {
    bool both_free = lo == FREE && hi == FREE;
    /* free states do not depend on the bounds' digits: shared across n
     * where the fraction allowed is the same */
    uint64_t tag = both_free ? (nb->integer ? 0u : (unsigned)frac_max(n) + 1) : 64u + (unsigned)n;
    uint64_t pos = both_free ? (i < n ? (uint64_t)(n - i) : 2048u + (uint64_t)(i - n)) : (uint64_t)i;
    uint64_t key = (tag << 38) | (pos << 26) | ((uint64_t)(lo * 2 + hi) << 24) |
                   ((uint64_t)(i == 0 && n > 1) << 21) | r;
    if (memo_get(nb, key, rule)) return LM_OK;
    alt_list alts = {0};
    lm_status st = LM_OK;
    if (i < n) {
        int first = i == 0 && n > 1 ? 1 : 0;
        int dlo = lo == EQUAL ? digit_at(nb->lo.d, i) - '0' : 0;
        int dhi = hi == EQUAL ? digit_at(nb->hi.d, i) - '0' : 9;
        if (dlo < first) dlo = first;
        if (nb->multiple == 1) {
            /* digits with the same next state share one class */
            for (int d = dlo; d <= dhi && st == LM_OK;) {
                int nlo = lo == EQUAL && d == digit_at(nb->lo.d, i) - '0' ? EQUAL : FREE;
                int nhi = hi == EQUAL && d == digit_at(nb->hi.d, i) - '0' ? EQUAL : FREE;
                int e = d;
                while (e + 1 <= dhi && nlo == FREE && nhi == FREE &&
                       !(lo == EQUAL && e + 1 == digit_at(nb->lo.d, i) - '0') &&
                       !(hi == EQUAL && e + 1 == digit_at(nb->hi.d, i) - '0'))
                    e++;
                uint32_t next = NONE;
                st = node(nb, n, i + 1, nlo, nhi, 0, &next);
                if (st == LM_OK && next != NONE) {
                    lm_gseq *s = alt_new(&alts);
                    if (!s) st = lm_fail(nb->err, LM_ERR_NOMEM, "out of memory");
                    if (st == LM_OK) st = digit_elem(nb, s, d, e);
                    if (s) lm_gseq_ref(s, next);
                }
                d = e + 1;
            }
        } else {
            for (int d = dlo; d <= dhi && st == LM_OK; d++) {
                int nlo = lo == EQUAL && d == digit_at(nb->lo.d, i) - '0' ? EQUAL : FREE;
                int nhi = hi == EQUAL && d == digit_at(nb->hi.d, i) - '0' ? EQUAL : FREE;
                uint32_t next = NONE;
                st = node(nb, n, i + 1, nlo, nhi, (r * 10 + (unsigned)d) % nb->multiple, &next);
                if (st == LM_OK && next != NONE) {
                    lm_gseq *s = alt_new(&alts);
                    if (!s) st = lm_fail(nb->err, LM_ERR_NOMEM, "out of memory");
                    if (st == LM_OK) st = digit_elem(nb, s, d, d);
                    if (s) lm_gseq_ref(s, next);
                }
            }
        }
    } else {
        if (may_end(nb, i, lo, hi, r) && !alt_new(&alts)) st = lm_fail(nb->err, LM_ERR_NOMEM, "out of memory");
        if (!nb->integer && i - n < frac_max(n)) {
            int dlo = lo == EQUAL ? digit_at(nb->lo.d, i) - '0' : 0;
            int dhi = hi == EQUAL ? digit_at(nb->hi.d, i) - '0' : 9;
            for (int d = dlo; d <= dhi && st == LM_OK;) {
                int nlo = lo == EQUAL && d == digit_at(nb->lo.d, i) - '0' ? EQUAL : FREE;
                int nhi = hi == EQUAL && d == digit_at(nb->hi.d, i) - '0' ? EQUAL : FREE;
                int e = d;
                while (e + 1 <= dhi && nlo == FREE && nhi == FREE &&
                       !(lo == EQUAL && e + 1 == digit_at(nb->lo.d, i) - '0') &&
                       !(hi == EQUAL && e + 1 == digit_at(nb->hi.d, i) - '0'))
                    e++;
                uint32_t next = NONE;
                st = node(nb, n, i + 1, nlo, nhi, 0, &next);
                if (st == LM_OK && next != NONE) {
                    lm_gseq *s = alt_new(&alts);
                    if (!s) st = lm_fail(nb->err, LM_ERR_NOMEM, "out of memory");
                    if (st == LM_OK && i == n) st = lm_gseq_byte(nb->b, s, '.', nb->err);
                    if (st == LM_OK) st = digit_elem(nb, s, d, e);
                    if (s) lm_gseq_ref(s, next);
                }
                d = e + 1;
            }
        }
    }
    if (st != LM_OK) {
        alt_free(&alts);
        return st;
    }
    st = rule_of_alts(nb, &alts, rule);
    if (st == LM_OK) st = memo_put(nb, key, *rule);
    return st;
}

/* Adds to alts the numbers of one sign (prefix "-" or none) whose
 * magnitudes lie within nb->lo / nb->hi. */
static lm_status magnitudes(number_builder *nb, bool negative, alt_list *alts) {
    int longest = LM_NUMBER_MAX_DIGITS;
    if (nb->lo.present && nb->lo.d->int_len > longest) longest = nb->lo.d->int_len;
    for (int n = 1; n <= longest; n++) {
        int lo = FREE, hi = FREE;
        if (nb->lo.present) {
            if (n < nb->lo.d->int_len) continue;
            lo = n == nb->lo.d->int_len ? EQUAL : FREE;
        } else if (n > LM_NUMBER_MAX_DIGITS) {
            continue;
        }
        if (nb->hi.present) {
            if (n > nb->hi.d->int_len) continue;
            hi = n == nb->hi.d->int_len ? EQUAL : FREE;
        }
        uint32_t rule = NONE;
        lm_status st = node(nb, n, 0, lo, hi, 0, &rule);
        if (st != LM_OK) return st;
        if (rule == NONE) continue;
        lm_gseq *s = alt_new(alts);
        if (!s) return lm_fail(nb->err, LM_ERR_NOMEM, "out of memory");
        if (negative && (st = lm_gseq_byte(nb->b, s, '-', nb->err)) != LM_OK) return st;
        lm_gseq_ref(s, rule);
    }
    return LM_OK;
}

lm_status lm_json_number(lm_grammar_builder *b, const lm_number_bounds *bounds, lm_gseq *out, lm_error *err) {
    decimal min, max;
    if (bounds->min) {
        lm_status st = read_bound(bounds->min, bounds->min_exclusive, &min, err);
        if (st != LM_OK) return st;
    }
    if (bounds->max) {
        lm_status st = read_bound(bounds->max, bounds->max_exclusive, &max, err);
        if (st != LM_OK) return st;
    }
    if (bounds->multiple > LM_NUMBER_MAX_MULTIPLE)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: 'multipleOf' above %d is not supported",
                       LM_NUMBER_MAX_MULTIPLE);
    number_builder nb = {.b = b, .err = err, .integer = bounds->integer || bounds->multiple > 0,
                         .multiple = bounds->multiple ? bounds->multiple : 1};
    alt_list alts = {0};
    lm_status st = LM_OK;
    bool min_nonneg = bounds->min && (!min.negative || min.zero);
    bool max_neg = bounds->max && max.negative && !max.zero;
    /* x >= 0: magnitude from max(min, 0) up to max */
    if (!max_neg) {
        nb.lo = (side){min_nonneg, min_nonneg && bounds->min_exclusive, &min};
        nb.hi = (side){bounds->max != NULL, bounds->max_exclusive, &max};
        st = magnitudes(&nb, false, &alts);
    }
    /* x < 0 (or -0): magnitude from |max| (where max <= 0) up to |min| */
    if (st == LM_OK && !min_nonneg) {
        bool max_nonpos = bounds->max && (max.negative || max.zero);
        nb.lo = (side){max_nonpos, max_nonpos && bounds->max_exclusive, &max};
        nb.hi = (side){bounds->min != NULL, bounds->min_exclusive, &min};
        st = magnitudes(&nb, true, &alts);
    }
    uint32_t rule = NONE;
    if (st == LM_OK) st = rule_of_alts(&nb, &alts, &rule);
    else alt_free(&alts);
    free(nb.keys);
    free(nb.rules);
    if (st != LM_OK) return st;
    if (rule == NONE)
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "JSON schema: no number of at most %d digits satisfies its minimum/maximum/multipleOf, so nothing matches",
                       LM_NUMBER_MAX_DIGITS);
    lm_gseq_ref(out, rule);
    return LM_OK;
}

void lm_json_number_text(double v, char *buf, size_t size) {
    if (!isfinite(v)) {
        snprintf(buf, size, "null");
        return;
    }
    if (v == floor(v) && fabs(v) < 9.2e18) {
        snprintf(buf, size, "%lld", (long long)v);
        return;
    }
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, size, "%.*g", p, v);
        if (strtod(buf, NULL) == v) return;
    }
}
