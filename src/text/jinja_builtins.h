/* Names of the filters, tests, methods and global functions the engine
 * knows.  The parser resolves names to these ids once; the evaluator switches
 * on them. */
#ifndef LOOM_TEXT_JINJA_BUILTINS_H
#define LOOM_TEXT_JINJA_BUILTINS_H

#include <stddef.h>

typedef enum {
    JF_ABS,
    JF_ATTR,
    JF_BATCH,
    JF_CAPITALIZE,
    JF_CENTER,
    JF_COUNT,
    JF_DEFAULT,
    JF_DICTSORT,
    JF_ESCAPE,
    JF_FIRST,
    JF_FLOAT,
    JF_FORMAT,
    JF_INDENT,
    JF_INT,
    JF_ITEMS,
    JF_JOIN,
    JF_LAST,
    JF_LENGTH,
    JF_LIST,
    JF_LOWER,
    JF_MAP,
    JF_MAX,
    JF_MIN,
    JF_PPRINT,
    JF_REJECT,
    JF_REJECTATTR,
    JF_REPLACE,
    JF_REVERSE,
    JF_ROUND,
    JF_SAFE,
    JF_SELECT,
    JF_SELECTATTR,
    JF_SORT,
    JF_STRING,
    JF_SUM,
    JF_TITLE,
    JF_TOJSON,
    JF_TRIM,
    JF_TRUNCATE,
    JF_UNIQUE,
    JF_UPPER,
    JF_WORDCOUNT,
} jfilter_id;

typedef enum {
    JTS_BOOLEAN,
    JTS_CALLABLE,
    JTS_DEFINED,
    JTS_DIVISIBLEBY,
    JTS_EQ,
    JTS_ESCAPED,
    JTS_EVEN,
    JTS_FALSE,
    JTS_FILTER,
    JTS_FLOAT,
    JTS_GE,
    JTS_GT,
    JTS_IN,
    JTS_INTEGER,
    JTS_ITERABLE,
    JTS_LE,
    JTS_LOWER,
    JTS_LT,
    JTS_MAPPING,
    JTS_NE,
    JTS_NONE,
    JTS_NUMBER,
    JTS_ODD,
    JTS_SAMEAS,
    JTS_SEQUENCE,
    JTS_STRING,
    JTS_TEST,
    JTS_TRUE,
    JTS_UNDEFINED,
    JTS_UPPER,
} jtest_id;

typedef enum {
    /* str */
    JM_STARTSWITH,
    JM_ENDSWITH,
    JM_SPLIT,
    JM_RSPLIT,
    JM_STRIP,
    JM_LSTRIP,
    JM_RSTRIP,
    JM_REPLACE,
    JM_UPPER,
    JM_LOWER,
    JM_TITLE,
    JM_CAPITALIZE,
    JM_SWAPCASE,
    JM_CASEFOLD,
    JM_FIND,
    JM_RFIND,
    JM_INDEX,
    JM_RINDEX,
    JM_COUNT,
    JM_JOIN,
    JM_FORMAT,
    JM_ISDIGIT,
    JM_ISALPHA,
    JM_ISALNUM,
    JM_ISSPACE,
    JM_ISUPPER,
    JM_ISLOWER,
    JM_ISNUMERIC,
    JM_ISDECIMAL,
    JM_SPLITLINES,
    JM_ZFILL,
    JM_CENTER,
    JM_LJUST,
    JM_RJUST,
    JM_PARTITION,
    JM_RPARTITION,
    JM_REMOVEPREFIX,
    JM_REMOVESUFFIX,
    JM_STR_LAST_,
    /* dict */
    JM_GET,
    JM_ITEMS,
    JM_KEYS,
    JM_VALUES,
    JM_COPY,
    /* list (index and count share the str ids) */
    /* loop */
    JM_LOOP_CYCLE,
    JM_LOOP_CHANGED,
    /* methods that would mutate a value: the immutable sandbox refuses them */
    JM_UNSAFE,
} jmethod_id;

typedef enum {
    JB_RANGE,
    JB_NAMESPACE,
    JB_DICT,
    JB_RAISE_EXCEPTION,
    JB_STRFTIME_NOW,
} jbuiltin_id;

int jfilter_lookup(const char *name, size_t len);
int jtest_lookup(const char *name, size_t len);
int jbuiltin_lookup(const char *name, size_t len);
/* Methods by receiver: 's' str, 'd' dict, 'l' list. -1 when unknown. */
int jmethod_lookup(char receiver, const char *name, size_t len);
const char *jbuiltin_name(int id);

#endif
