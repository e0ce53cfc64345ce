/* A regular expression compiled into grammar elements.
 *
 * The subset: literals (UTF-8 characters), escapes (\d \D \w \W \s \S, \n
 * \r \t \f \v \0, \xHH, and any escaped punctuation), classes [...] with
 * ranges and negation (ASCII members; a negated class also matches every
 * non-ASCII character), '.', groups ( ) and (?: ), alternation |, and the
 * quantifiers * + ? {m} {m,} {m,n} (m, n <= LM_REGEX_MAX_REPEAT; a lazy '?'
 * after one changes nothing here: the language is the same).  '^' at the
 * start and '$' at the end are anchors; the whole input must match.
 * Anything else (backreferences, lookaround, \b, Unicode classes, ...) is
 * refused with LM_ERR_UNSUPPORTED naming it. */
#ifndef LOOM_GRAMMAR_REGEX_COMPILE_H
#define LOOM_GRAMMAR_REGEX_COMPILE_H

#include "grammar/grammar.h"

#define LM_REGEX_MAX_REPEAT 1000
#define LM_REGEX_MAX_LENGTH 16384
#define LM_REGEX_MAX_NESTING 64

typedef struct {
    /* bytes no class may match (a JSON string's pattern leaves out '"', '\\'
     * and control characters, which would need escapes); a literal of one
     * is refused */
    lm_byte_class forbidden;
    uint32_t utf8_rule; /* a rule matching one multi-byte UTF-8 character */
    bool has_anchors;   /* out: the pattern began with ^ and ended with $ */
} lm_regex_options;

/* Appends the pattern's language (len bytes) to out.  With search
 * semantics (JSON Schema's pattern) a pattern not anchored at an end gets
 * "any characters" there. */
lm_status lm_regex_compile(lm_grammar_builder *b, const char *pattern, size_t len, bool search,
                           lm_regex_options *options, lm_gseq *out, lm_error *err);

/* Compiles the pattern into a grammar of its own (as lm_regex_compile with
 * options' forbidden bytes) and checks its cost (grammar/cost.h), refusing
 * it as "<what> `pattern`" (cut to 64 bytes): a pattern inside a JSON
 * schema is named by itself, not by the whole schema. */
lm_status lm_regex_check_cost(const char *pattern, size_t len, bool search, const lm_regex_options *options,
                              const char *what, uint64_t deadline_ns, lm_error *err);

#endif
