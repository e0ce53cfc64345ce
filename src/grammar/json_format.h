/* JSON Schema's `format` as regular languages (for the JSON schema
 * grammar, grammar/json_grammar.h): what each generates is a subset of the
 * format chosen so that every answer is valid for RFC 3339, RFC 4291, RFC
 * 3986, RFC 1123 and ISO 8601 checkers alike:
 *   date       YYYY-MM-DD, years 1000-2999, days 01-28 (every month has them)
 *   time       hh:mm:ss, an optional fraction of 1-6 digits, then Z or +hh:mm / -hh:mm
 *   date-time  date "T" time
 *   duration   P then years, months, days (in that order, at least one, 1-4
 *              digits each) or weeks alone, optionally T then hours,
 *              minutes, seconds (at least one); or PT and that part alone
 *   email      lower-case letters and digits in dot-separated words, "@",
 *              a domain of dot-separated labels, a final label of 2-6 letters
 *   hostname   1-4 dot-separated labels of lower-case letters, digits and
 *              inner hyphens, 1-63 characters each
 *   ipv4       four decimal octets 0-255 without leading zeros
 *   ipv6       eight groups of 1-4 lower-case hex digits (no "::" form)
 *   uri        http, https or ftp "://" a hostname, then an optional path of
 *              unreserved characters and "/", query "?..." and fragment "#..."
 *   uri-reference, iri, iri-reference: a uri, or a relative path
 *   uuid       8-4-4-4-12 lower-case hex digits
 *   json-pointer, relative-json-pointer: "/"-separated tokens of letters,
 *              digits, . _ - and the escapes ~0 ~1 (after a count, or "#")
 *   idn-email, idn-hostname: as email / hostname, labels without hyphens
 *   regex, uri-template: letters, digits and a few punctuation marks that
 *              are literal in both
 * Formats that are annotations only (JSON Schema 2020-12 asserts none by
 * default; OpenAPI's int32, float, password, ...) constrain nothing; the
 * formats a validator checks that loom does not generate (color) are
 * refused by name. */
#ifndef LOOM_GRAMMAR_JSON_FORMAT_H
#define LOOM_GRAMMAR_JSON_FORMAT_H

#include <stdbool.h>

/* The anchored regular expression (grammar/regex_compile.h's subset) of
 * the format's strings, or NULL: *refused set when loom refuses the format,
 * clear when it constrains nothing.  *min_len / *max_len: the characters
 * its strings have (max -1: unbounded). */
const char *lm_json_format_regex(const char *format, bool *refused, int *min_len, int *max_len);

#endif
