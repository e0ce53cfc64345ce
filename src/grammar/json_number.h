/* JSON numbers for a JSON Schema's numeric keywords: the language of the
 * decimal numbers within minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum (any values, written as the schema writes them), and of
 * the integers that are multiples of an integer multipleOf.
 *
 * A bounded number is written without an exponent, with at most 15
 * significant digits (integer and fraction digits together; more integer
 * digits only where a lower bound needs them), so that a bound checked
 * exactly on the decimal text holds for a validator that reads both as
 * doubles too: rounding is monotonic, and two decimals of at most 15
 * significant digits never round to the same double.  That is why an
 * exclusive bound of more than 15 significant digits is refused, and why a
 * bound written as a fraction or exponent whose magnitude is 2^53 or more
 * is compared as the double it reads as (an integer answer is compared
 * with it exactly).  The grammar is a digit-by-digit comparison with each
 * bound: a rule per (position, still equal to the lower bound, still equal
 * to the upper bound, remainder). */
#ifndef LOOM_GRAMMAR_JSON_NUMBER_H
#define LOOM_GRAMMAR_JSON_NUMBER_H

#include <stdbool.h>

#include "grammar/grammar.h"

#define LM_NUMBER_MAX_DIGITS 15
#define LM_NUMBER_MAX_MULTIPLE 1000 /* multipleOf: the remainders a grammar tracks */
#define LM_NUMBER_MAX_TEXT 400      /* a bound's decimal text (1e308 written out) */

typedef struct {
    bool integer;                     /* no fraction */
    const char *min, *max;            /* NULL: none; the schema's number text */
    bool min_exclusive, max_exclusive;
    unsigned multiple;                /* 0: none; else integers only, multiples of it */
} lm_number_bounds;

/* Appends the bounded number language to out; LM_ERR_UNSUPPORTED when no
 * number of the grammar's form satisfies the bounds or a bound cannot be
 * honoured exactly (the message says which). */
lm_status lm_json_number(lm_grammar_builder *b, const lm_number_bounds *nb, lm_gseq *out, lm_error *err);

/* The shortest text that reads back as v exactly (at most 17 significant
 * digits; an integral v below 2^63 as an integer): a value written back
 * into JSON keeps its value. */
void lm_json_number_text(double v, char *buf, size_t size);

#endif
