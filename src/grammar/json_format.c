/* JSON Schema formats as regular expressions (grammar/json_format.h). */
#include "grammar/json_format.h"

#include <string.h>

#define DATE "[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
#define TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define LABEL "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
#define HOST LABEL "(\\." LABEL "){0,3}"
#define OCTET "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define HEX4 "[0-9a-f]{1,4}"
#define SEGMENT "[A-Za-z0-9._~-]+"
#define URI "(https?|ftp)://" HOST "(/" SEGMENT ")*/?(\\?[A-Za-z0-9._~=&-]*)?(#[A-Za-z0-9._~-]*)?"
#define RELATIVE "/?" SEGMENT "(/" SEGMENT ")*"
#define N4 "[0-9]{1,4}"
#define POINTER "(/([A-Za-z0-9._-]|~[01])*)*"
#define PLAIN_LABEL "[a-z][a-z0-9]{0,20}" /* no hyphen: IDNA's rules on "--" never apply */

typedef struct {
    const char *name, *regex;
    int min_len, max_len;
} format_form;

static const format_form forms[] = {
    {"date", "^" DATE "$", 10, 10},
    {"time", "^" TIME "$", 9, 21},
    {"date-time", "^" DATE "T" TIME "$", 20, 32},
    {"duration",
     "^P((" N4 "Y(" N4 "M)?(" N4 "D)?|" N4 "M(" N4 "D)?|" N4 "D)(T(" N4 "H(" N4 "M)?(" N4 "S)?|" N4 "M(" N4
     "S)?|" N4 "S))?|" N4 "W|T(" N4 "H(" N4 "M)?(" N4 "S)?|" N4 "M(" N4 "S)?|" N4 "S))$",
     3, -1},
    {"email", "^[a-z0-9]+(\\.[a-z0-9]+)*@" LABEL "(\\." LABEL "){0,2}\\.[a-z]{2,6}$", 6, -1},
    {"hostname", "^" HOST "$", 1, 255},
    {"ipv4", "^" OCTET "(\\." OCTET "){3}$", 7, 15},
    {"ipv6", "^(" HEX4 ":){7}" HEX4 "$", 15, 39},
    {"uri", "^" URI "$", 8, -1},
    {"uri-reference", "^(" URI "|" RELATIVE ")$", 1, -1},
    {"iri", "^" URI "$", 8, -1},
    {"iri-reference", "^(" URI "|" RELATIVE ")$", 1, -1},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", 36, 36},
    {"json-pointer", "^" POINTER "$", 0, -1},
    /* no 0 after the count's first digit: a checker (python-jsonschema 4.10) takes any "0d" for a leading zero */
    {"relative-json-pointer", "^(0|[1-9][1-9]{0,8})(#|" POINTER ")$", 1, -1},
    {"idn-email", "^[a-z0-9]+(\\.[a-z0-9]+)*@" PLAIN_LABEL "(\\." PLAIN_LABEL "){0,2}\\.[a-z]{2,6}$", 6, -1},
    {"idn-hostname", "^" PLAIN_LABEL "(\\." PLAIN_LABEL "){0,3}$", 1, 87},
    /* a regular expression, a URI template: of literal characters only */
    {"regex", "^[A-Za-z0-9 _-]*$", 0, -1},
    {"uri-template", "^[A-Za-z0-9/._~:-]*$", 0, -1},
};

/* checked by validators, not generated here */
static const char *const refused_formats[] = {"color", NULL};

const char *lm_json_format_regex(const char *format, bool *refused, int *min_len, int *max_len) {
    *refused = false;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (strcmp(format, forms[i].name) == 0) {
            *min_len = forms[i].min_len;
            *max_len = forms[i].max_len;
            return forms[i].regex;
        }
    for (const char *const *r = refused_formats; *r; r++)
        if (strcmp(format, *r) == 0) *refused = true;
    return NULL;
}
