/* Name tables of the engine's filters, tests, methods and globals. */
#include "text/jinja_builtins.h"

#include <string.h>

typedef struct {
    const char *name;
    int id;
} named;

static const named filters[] = {
    {"abs", JF_ABS},           {"attr", JF_ATTR},
    {"batch", JF_BATCH},       {"capitalize", JF_CAPITALIZE},
    {"center", JF_CENTER},     {"count", JF_COUNT},
    {"d", JF_DEFAULT},         {"default", JF_DEFAULT},
    {"dictsort", JF_DICTSORT}, {"e", JF_ESCAPE},
    {"escape", JF_ESCAPE},     {"first", JF_FIRST},
    {"float", JF_FLOAT},       {"format", JF_FORMAT},
    {"indent", JF_INDENT},     {"int", JF_INT},
    {"items", JF_ITEMS},       {"join", JF_JOIN},
    {"last", JF_LAST},         {"length", JF_LENGTH},
    {"list", JF_LIST},         {"lower", JF_LOWER},
    {"map", JF_MAP},           {"max", JF_MAX},
    {"min", JF_MIN},           {"pprint", JF_PPRINT},
    {"reject", JF_REJECT},     {"rejectattr", JF_REJECTATTR},
    {"replace", JF_REPLACE},   {"reverse", JF_REVERSE},
    {"round", JF_ROUND},       {"safe", JF_SAFE},
    {"select", JF_SELECT},     {"selectattr", JF_SELECTATTR},
    {"sort", JF_SORT},         {"string", JF_STRING},
    {"sum", JF_SUM},           {"title", JF_TITLE},
    {"tojson", JF_TOJSON},     {"trim", JF_TRIM},
    {"truncate", JF_TRUNCATE}, {"unique", JF_UNIQUE},
    {"upper", JF_UPPER},       {"wordcount", JF_WORDCOUNT},
};

static const named tests[] = {
    {"boolean", JTS_BOOLEAN},
    {"callable", JTS_CALLABLE},
    {"defined", JTS_DEFINED},
    {"divisibleby", JTS_DIVISIBLEBY},
    {"eq", JTS_EQ},
    {"equalto", JTS_EQ},
    {"escaped", JTS_ESCAPED},
    {"even", JTS_EVEN},
    {"false", JTS_FALSE},
    {"filter", JTS_FILTER},
    {"float", JTS_FLOAT},
    {"ge", JTS_GE},
    {"greaterthan", JTS_GT},
    {"gt", JTS_GT},
    {"in", JTS_IN},
    {"integer", JTS_INTEGER},
    {"iterable", JTS_ITERABLE},
    {"le", JTS_LE},
    {"lessthan", JTS_LT},
    {"lower", JTS_LOWER},
    {"lt", JTS_LT},
    {"mapping", JTS_MAPPING},
    {"ne", JTS_NE},
    {"none", JTS_NONE},
    {"number", JTS_NUMBER},
    {"odd", JTS_ODD},
    {"sameas", JTS_SAMEAS},
    {"sequence", JTS_SEQUENCE},
    {"string", JTS_STRING},
    {"test", JTS_TEST},
    {"true", JTS_TRUE},
    {"undefined", JTS_UNDEFINED},
    {"upper", JTS_UPPER},
};

static const named builtins[] = {
    {"range", JB_RANGE},
    {"namespace", JB_NAMESPACE},
    {"dict", JB_DICT},
    {"raise_exception", JB_RAISE_EXCEPTION},
    {"strftime_now", JB_STRFTIME_NOW},
};

static const named str_methods[] = {
    {"startswith", JM_STARTSWITH},
    {"endswith", JM_ENDSWITH},
    {"split", JM_SPLIT},
    {"rsplit", JM_RSPLIT},
    {"strip", JM_STRIP},
    {"lstrip", JM_LSTRIP},
    {"rstrip", JM_RSTRIP},
    {"replace", JM_REPLACE},
    {"upper", JM_UPPER},
    {"lower", JM_LOWER},
    {"title", JM_TITLE},
    {"capitalize", JM_CAPITALIZE},
    {"swapcase", JM_SWAPCASE},
    {"casefold", JM_CASEFOLD},
    {"find", JM_FIND},
    {"rfind", JM_RFIND},
    {"index", JM_INDEX},
    {"rindex", JM_RINDEX},
    {"count", JM_COUNT},
    {"join", JM_JOIN},
    {"format", JM_FORMAT},
    {"isdigit", JM_ISDIGIT},
    {"isalpha", JM_ISALPHA},
    {"isalnum", JM_ISALNUM},
    {"isspace", JM_ISSPACE},
    {"isupper", JM_ISUPPER},
    {"islower", JM_ISLOWER},
    {"isnumeric", JM_ISNUMERIC},
    {"isdecimal", JM_ISDECIMAL},
    {"splitlines", JM_SPLITLINES},
    {"zfill", JM_ZFILL},
    {"center", JM_CENTER},
    {"ljust", JM_LJUST},
    {"rjust", JM_RJUST},
    {"partition", JM_PARTITION},
    {"rpartition", JM_RPARTITION},
    {"removeprefix", JM_REMOVEPREFIX},
    {"removesuffix", JM_REMOVESUFFIX},
};

static const named dict_methods[] = {
    {"get", JM_GET},           {"items", JM_ITEMS},   {"keys", JM_KEYS},  {"values", JM_VALUES},
    {"copy", JM_COPY},         {"clear", JM_UNSAFE},  {"pop", JM_UNSAFE}, {"popitem", JM_UNSAFE},
    {"setdefault", JM_UNSAFE}, {"update", JM_UNSAFE},
};

static const named list_methods[] = {
    {"index", JM_INDEX},   {"count", JM_COUNT},    {"copy", JM_COPY},     {"append", JM_UNSAFE},
    {"clear", JM_UNSAFE},  {"extend", JM_UNSAFE},  {"insert", JM_UNSAFE}, {"pop", JM_UNSAFE},
    {"remove", JM_UNSAFE}, {"reverse", JM_UNSAFE}, {"sort", JM_UNSAFE},
};

static int find(const named *table, size_t count, const char *name, size_t len) {
    for (size_t i = 0; i < count; i++)
        if (strlen(table[i].name) == len && memcmp(table[i].name, name, len) == 0)
            return table[i].id;
    return -1;
}

#define FIND(table, name, len) find(table, sizeof table / sizeof table[0], name, len)

int jfilter_lookup(const char *name, size_t len) { return FIND(filters, name, len); }
int jtest_lookup(const char *name, size_t len) { return FIND(tests, name, len); }
int jbuiltin_lookup(const char *name, size_t len) { return FIND(builtins, name, len); }

int jmethod_lookup(char receiver, const char *name, size_t len) {
    switch (receiver) {
    case 's': return FIND(str_methods, name, len);
    case 'd': return FIND(dict_methods, name, len);
    case 'l': return FIND(list_methods, name, len);
    }
    return -1;
}

const char *jbuiltin_name(int id) {
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (builtins[i].id == id) return builtins[i].name;
    return "?";
}
