/* The chat-template engine, feature by feature: whitespace control, value
 * printing, operators, statements, filters, tests, methods, error messages
 * (each names its line), sandbox limits, the JSON context parser, and
 * rendering one compiled template from several threads at once.  Expected
 * strings are what Jinja2 3.1 renders with transformers' settings (checked
 * with python3-jinja2; tests/jinja_diff.py compares many more). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "text/chat_template.h"

#define NOW 1721692800 /* 2024-07-23 00:00:00 UTC */

static lm_status render_opts(const char *tpl, const char *ctx, const lm_chat_template_options *o,
                             char **out, lm_error *err) {
    lm_chat_template *t;
    *out = NULL;
    lm_status st = lm_chat_template_compile(tpl, strlen(tpl), &t, err);
    if (st) return st;
    size_t len;
    st = lm_chat_template_render_json(t, ctx, strlen(ctx), o, out, &len, err);
    if (!st && strlen(*out) != len) st = lm_fail(err, LM_ERR_INTERNAL, "length mismatch");
    lm_chat_template_free(t);
    return st;
}

static lm_status render(const char *tpl, const char *ctx, char **out, lm_error *err) {
    lm_chat_template_options o;
    lm_chat_template_options_default(&o);
    o.has_now = true;
    o.now = NOW;
    return render_opts(tpl, ctx, &o, out, err);
}

typedef struct {
    const char *tpl, *ctx, *want;
} rcase;

/* Renders every case; reports each mismatch. */
static void run_cases(const rcase *cases, size_t n, const char *file, int line) {
    for (size_t i = 0; i < n; i++) {
        lm_error err = {0};
        char *out;
        const char *ctx = cases[i].ctx ? cases[i].ctx : "{}";
        if (render(cases[i].tpl, ctx, &out, &err)) {
            test_failed(file, line, "case %zu %s: %s", i, cases[i].tpl, err.message);
            continue;
        }
        if (strcmp(out, cases[i].want) != 0)
            test_failed(file, line, "case %zu %s\n    got  [%s]\n    want [%s]", i, cases[i].tpl,
                        out, cases[i].want);
        free(out);
    }
}
#define RUN_CASES(c) run_cases(c, sizeof c / sizeof c[0], __FILE__, __LINE__)

/* Expects failure with a message containing `want`. */
static void expect_error(const char *tpl, const char *ctx, const char *want, const char *file,
                         int line) {
    lm_error err = {0};
    char *out;
    lm_status st = render(tpl, ctx ? ctx : "{}", &out, &err);
    if (st == LM_OK) {
        test_failed(file, line, "%s rendered [%s], expected an error containing [%s]", tpl, out,
                    want);
        free(out);
        return;
    }
    if (!strstr(err.message, want))
        test_failed(file, line, "%s: error [%s] lacks [%s]", tpl, err.message, want);
}
#define EXPECT_ERROR(tpl, ctx, want) expect_error(tpl, ctx, want, __FILE__, __LINE__)

static void test_whitespace_control(void) {
    static const rcase cases[] = {
        {"a\n\n", NULL, "a\n"}, /* one final newline dropped */
        {"a\r\nb\rc", NULL, "a\nb\nc"},
        {"  {% if true %}\n  x\n  {% endif %}\n  {{ 'v' }}\nend", NULL, "  x\n  v\nend"},
        {"a  {{- 'b' -}}  c", NULL, "abc"},
        {"x\n  {%- if true -%}  y  {%- endif -%}\n z", NULL, "xyz"},
        {"  {%+ if true %}x{% endif +%}\ny", NULL, "  x\ny"},
        {"{% if true %}\n\nx{% endif %}\n\ny", NULL, "\nx\ny"},
        {"x   {% if true %}y{% endif %}   z", NULL, "x   y   z"},
        {"a{# c #}b\n{# line #}\nc {#- s -#} d", NULL, "ab\ncd"},
        {"{% raw %}{{ x }}{% if %}{% endraw %}|{%- raw -%}  y  {%- endraw -%}|", NULL,
         "{{ x }}{% if %}|y|"},
        {"line\n    {{ 'v' }}\n    {% if true %}b{% endif %}", NULL, "line\n    v\nb"},
    };
    RUN_CASES(cases);
}

static void test_printing(void) {
    static const rcase cases[] = {
        {"{{ 1 }} {{ 1.0 }} {{ 1.5e-7 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 1e-05 }}", NULL,
         "1 1.0 1.5e-07 1e+16 1000000000000000.0 0.0001 1e-05"},
        {"{{ 0.1 + 0.2 }} {{ 1/3 }} {{ -0.0 }} {{ 123456789.123456789 }} {{ 5e-324 }}", NULL,
         "0.30000000000000004 0.3333333333333333 -0.0 123456789.12345679 5e-324"},
        {"{{ true }} {{ false }} {{ none }} {{ missing }}|", NULL, "True False None |"},
        {"{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }}", NULL,
         "[1, 'a', None, True, 1.5, {'k': \"it's\"}]"},
        {"{{ (1,) }} {{ (1, 2) }} {{ () }} {{ {} }} {{ [] }}", NULL, "(1,) (1, 2) () {} []"},
        {"{{ ['a\\nb', '\\x01', 'q\\'\"', '\\u00e9'] }}", NULL,
         "['a\\nb', '\\x01', 'q\\'\"', 'é']"},
        {"{{ a }} {{ b }} {{ c }}", "{\"a\": 1, \"b\": 1.0, \"c\": [2.50, -0]}", "1 1.0 [2.5, 0]"},
        {"{{ ns }}", "{\"ns\": null}", "None"},
        {"{% set ns = namespace(a=1) %}{{ ns }}", NULL, "<Namespace {'a': 1}>"},
        {"{% macro f() %}{% endmacro %}{{ f }}", NULL, "<Macro 'f'>"},
    };
    RUN_CASES(cases);
}

static void test_literals(void) {
    static const rcase cases[] = {
        {"{{ 'a\\tb' }}|{{ \"q\\\"\" }}|{{ 'x\\\\y' }}|{{ '\\u00e9\\x41\\101' }}|{{ 'a' 'b' }}|{{ "
         "'\\d' }}",
         NULL, "a\tb|q\"|x\\y|éAA|ab|\\d"},
        {"{{ 1_000 }} {{ 0x1f }} {{ 0b101 }} {{ 0o17 }} {{ 2e3 }} {{ 1.0e-3 }}", NULL,
         "1000 31 5 15 2000.0 0.001"},
        {"{{ True }}{{ False }}{{ None }}", NULL, "TrueFalseNone"},
        {"{{ {'a': {'b': 1}} }}{{ {'a': {'b': 1}}.a.b }}", NULL, "{'a': {'b': 1}}1"},
    };
    RUN_CASES(cases);
}

static void test_operators(void) {
    static const rcase cases[] = {
        {"{{ 7 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 "
         "}} {{ -7.5 // 2 }}",
         NULL, "3.5 2.0 3 -4 1 2 1.5 -4.0"},
        {"{{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 1 + 2 * 3 }} {{ 10 - 2 - 3 }} {{ 1 + 1.5 }}",
         NULL, "1024 0.5 4 7 5 2.5"},
        {"{{ 'a' + 'b' ~ 'c' }} {{ 1 ~ (2 + 3) }} {{ 'a' ~ 1 ~ none ~ true ~ missing }}", NULL,
         "abc 15 a1NoneTrue"},
        {"{{ '=' * 3 }}{{ [1] * 2 }}{{ 2 * 'ab' }}", NULL, "===[1, 1]abab"},
        {"{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 1 != "
         "1 }}",
         NULL, "TrueFalseTrueTrueTrueFalse"},
        {"{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}{{ 1 in u "
         "}}",
         NULL, "TrueTrueTrueTrueFalse"},
        {"{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }}| {{ none or [] }} {{ not 1 }} {{ not "
         "'' }}",
         NULL, "x b | [] False True"},
        {"{{ 'y' if x else 'n' }} {{ 'a' if false }}| {{ 1 if 0 else 2 if 0 else 3 }}",
         "{\"x\": 1}", "y | 3"},
        {"{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0] %}{{ 'T' if v else 'F' }}{% endfor "
         "%}",
         NULL, "FTFTFTFFF"},
        {"{{ -1|abs }} {{ not 1 == 2 }} {{ (1 + 2) * 3 }}", NULL, "1 True 9"},
    };
    RUN_CASES(cases);
}

static void test_access_and_slices(void) {
    static const rcase cases[] = {
        {"{{ d.a }} {{ d['a'] }} {{ l[0] }} {{ l[-1] }} [{{ l[5] }}] {{ s[1] }} {{ l.0 }} {{ "
         "d.items is defined }}",
         "{\"d\": {\"a\": 1}, \"l\": [1, 2, 3], \"s\": \"h\u00e9llo\"}", "1 1 1 3 [] é 1 True"},
        {"{{ d['items'] }} {{ d.get('items') }} {{ d.get('z', 'dflt') }} {{ d.get('z') is none }}",
         "{\"d\": {\"items\": 5}}", "5 5 dflt True"},
        {"{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[1:-1] }}",
         "{\"l\": [1, 2, 3, 4, 5]}",
         "[2, 3, 4, 5] [1, 2] [5, 4, 3, 2, 1] [1, 3, 5] [4, 5] [2, 3, 4]"},
        {"{{ s[::-1] }} {{ s[1:3] }} {{ s[-3:] }} {{ s[::2] }} {{ s|length }}",
         "{\"s\": \"a\u00e9\u65e5\u672cx\"}", "x本日éa é日 日本x a日x 5"},
        {"{{ none.x is defined }} {{ d.x.__class__ is defined }}", "{\"d\": {\"x\": {}}}",
         "False False"},
    };
    RUN_CASES(cases);
}

static void test_statements(void) {
    static const rcase cases[] = {
        {"{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif "
         "%}{% endfor %}",
         NULL, "onetwomany"},
        {"{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
         "loop.revindex0 }}{{ loop.first }}"
         "{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
         NULL, "1032TrueFalse3b|2121FalseFalse3ac|3210FalseTrue3b|"},
        {"{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty"},
        {"{% for x in range(10) if x is odd %}{{ x }}/{{ loop.index }}/{{ loop.length }},{% endfor "
         "%}",
         NULL, "1/1/5,3/2/5,5/3/5,7/4/5,9/5/5,"},
        {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor "
         "%}",
         "{\"d\": {\"b\": 1, \"a\": [1, 2]}}", "b=1;a=[1, 2];ba"},
        {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break "
         "%}{% endif %}{{ x }}{% endfor %}",
         NULL, "0134"},
        {"{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", NULL, "ababa"},
        {"{% set x = 5 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}({{ x }}){% endfor %}{{ x }}",
         NULL, "[5](1)[5](2)5"},
        {"{% set x = 5 %}{% if true %}{% set x = 6 %}{% endif %}{{ x }}", NULL, "6"},
        {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c + d }}", NULL, "127"},
        {"{% set x %}hello {{ 'world' }}{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ "
         "y }}",
         NULL, "[hello world]ABC"},
        {"{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor "
         "%}{{ ns.n }}",
         NULL, "6"},
        {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", NULL, "3[]"},
        {"{% filter upper %}abc {{ 'def' }}{% endfilter %}", NULL, "ABC DEF"},
        {"{% print 'x', 1 %}", NULL, "x1"},
        {"{% for x in t recursive %}[{{ loop.depth }}{{ x.n }}{{ loop(x.c) }}]{% endfor %}",
         "{\"t\": [{\"n\": \"a\", \"c\": [{\"n\": \"b\", \"c\": []}]}, {\"n\": \"e\", \"c\": []}]}",
         "[1a[2b]][1e]"},
        {"{% for x in [1, 1, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", NULL,
         "121"},
        {"{% generation %}gen{% endgeneration %}!", NULL, "gen!"},
    };
    RUN_CASES(cases);
}

static void test_macros(void) {
    static const rcase cases[] = {
        {"{% macro g(name, p='!') %}Hi {{ name }}{{ p }}{% endmacro %}{{ g('A') }} {{ g('B', '?') "
         "}} {{ g(p='.', name='C') }}",
         NULL, "Hi A! Hi B? Hi C."},
        {"{% macro f() %}{{ x }}{% endmacro %}{% set x = 9 %}{{ f() }}", NULL, "9"},
        {"{% macro f(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ f(1) }}", NULL, "[1][]"},
        {"{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, k=4) }}", NULL,
         "1(2,){'k': 4}"},
        {"{% macro w(v) %}{% if v is mapping %}{% for k, x in v.items() %}{{ k }}:{{ w(x) }},{% "
         "endfor %}"
         "{% elif v is iterable and v is not string %}[{% for x in v %}{{ w(x) }}{% endfor %}]{% "
         "else %}{{ v }}{% endif %}"
         "{% endmacro %}{{ w(d) }}",
         "{\"d\": {\"a\": [1, {\"b\": \"c\"}], \"d\": null}}", "a:[1b:c,],d:None,"},
        {"{% macro box(t) %}[{{ t }}:{{ caller() }}]{% endmacro %}{% call box('x') %}in {{ 1 + 1 "
         "}}{% endcall %}",
         NULL, "[x:in 2]"},
        {"{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
         "{% call(item) each([1, 2]) %}<{{ item }}>{% endcall %}",
         NULL, "<1><2>"},
    };
    RUN_CASES(cases);
}

static void test_filters(void) {
    static const rcase cases[] = {
        {"{{ 'abc'|upper }} {{ 'ABC'|lower }} [{{ ' x '|trim }}] {{ 'hello-world x(y)'|title }} {{ "
         "'hELLO'|capitalize }}",
         NULL, "ABC abc [x] Hello-World X(Y) Hello"},
        {"{{ [1, 2]|length }} {{ 'h\u00e9'|count }} {{ u|length }}", NULL, "2 2 0"},
        {"{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|d(1) }}",
         NULL, "d  d None"},
        {"{{ [1, 2, 3]|join(', ') }} {{ u|join }}| {{ us|join(',', attribute='n') }}",
         "{\"us\": [{\"n\": \"a\"}, {\"n\": \"b\"}]}", "1, 2, 3 | a,b"},
        {"{{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'abc'|first }} {{ []|first is defined }}", NULL,
         "1 2 a False"},
        {"{{ 'abc'|list }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }}", NULL,
         "['a', 'b', 'c'] [3, 2, 1] cba"},
        {"{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '1.5'|float }} {{ "
         "'ab'|float }}",
         NULL, "42 4 7 3 1.5 0.0"},
        {"{{ 1|string }} {{ [1, 'a']|string }} {{ '<b>'|safe }} {{ '<a href=\"x\">'|e }}", NULL,
         "1 [1, 'a'] <b> &lt;a href=&#34;x&#34;&gt;"},
        {"{{ d|tojson }}|{{ [1, 'é', none, true, 1.0]|tojson }}|{{ 'é'|tojson(ensure_ascii=true) "
         "}}",
         "{\"d\": {\"b\": [1, 2.5], \"a\": \"\\u00e9\"}}",
         "{\"b\": [1, 2.5], \"a\": \"é\"}|[1, \"é\", null, true, 1.0]|\"\\u00e9\""},
        {"{{ d|tojson(indent=2) }}", "{\"d\": {\"a\": [1, {}], \"b\": []}}",
         "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}"},
        {"{{ d|tojson(sort_keys=true, separators=(',', ':')) }}", "{\"d\": {\"b\": 1, \"a\": 2}}",
         "{\"a\":2,\"b\":1}"},
        {"{{ '\\x1f\"\\\\'|tojson }}", NULL, "\"\\u001f\\\"\\\\\""},
        {"{{ d|items|list }} {{ u|items|list }}", "{\"d\": {\"a\": 1}}", "[('a', 1)] []"},
        {"{{ us|map(attribute='n')|list }} {{ us|selectattr('ok')|map(attribute='n')|join }} {{ "
         "[1, 2, 3]|select('odd')|list }}"
         " {{ [1, 2, 3]|reject('odd')|list }} {{ ['a']|map('upper')|list }} {{ "
         "us|rejectattr('ok')|list|length }}",
         "{\"us\": [{\"n\": \"a\", \"ok\": true}, {\"n\": \"b\", \"ok\": false}]}",
         "['a', 'b'] a [1, 3] [2] ['A'] 1"},
        {"{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ "
         "[1, 2, 1]|unique|list }}",
         NULL, "[1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] [1, 2]"},
        {"{{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }}", NULL,
         "3 1 6 3.5"},
        {"{{ d|dictsort }} {{ d|dictsort(by='value') }}", "{\"d\": {\"b\": 1, \"a\": 3}}",
         "[('a', 3), ('b', 1)] [('b', 1), ('a', 3)]"},
        {"{{ 'aaa'|replace('a', 'b', 2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ "
         "2.1|round(0, 'ceil') }} {{ 7|round }}",
         NULL, "bba 2.0 4.0 2.67 3.0 7"},
        {"{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}", NULL,
         "a\n    b\n\n    c|  a\n  b"},
        {"{{ 'hello world foo bar'|truncate(9) }}|{{ 'a b  c'|wordcount }}|{{ 'ab'|center(6) }}|",
         NULL, "hello...|3|  ab  |"},
        {"{{ [1, 2, 3]|batch(2)|list }} {{ '%s=%d'|format('a', 1) }} {{ d|attr('a') }}|",
         "{\"d\": {\"a\": 1}}", "[[1, 2], [3]] a=1 |"},
    };
    RUN_CASES(cases);
}

static void test_tests(void) {
    static const rcase cases[] = {
        {"{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ x is not "
         "none }}",
         "{\"x\": 1}", "TrueFalseTrueTrueTrue"},
        {"{% for v in [1, 1.5, 'a', [1], {'a': 1}, none, true] %}{{ v is string }}{{ v is mapping "
         "}}{{ v is iterable }}"
         "{{ v is sequence }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is boolean "
         "}}|{% endfor %}",
         NULL,
         "FalseFalseFalseFalseTrueTrueFalseFalse|FalseFalseFalseFalseTrueFalseTrueFalse|"
         "TrueFalseTrueTrueFalseFalseFalseFalse|"
         "FalseFalseTrueTrueFalseFalseFalseFalse|FalseTrueTrueTrueFalseFalseFalseFalse|"
         "FalseFalseFalseFalseFalseFalseFalseFalse|"
         "FalseFalseFalseFalseTrueFalseFalseTrue|"},
        {"{{ true is true }}{{ 1 is true }}{{ 0 is false }}{{ 6 is divisibleby 3 }}{{ 7 is "
         "divisibleby(3) }}{{ 3 is odd }}{{ 4 is even }}",
         NULL, "TrueFalseFalseTrueFalseTrueTrue"},
        {"{{ 3 is gt 2 }}{{ 'a' is eq 'a' }}{{ 2 is in [1, 2] }}{{ 'a' is lower }}{{ 'A' is upper "
         "}}{{ range is callable }}",
         NULL, "TrueTrueTrueTrueTrueTrue"},
    };
    RUN_CASES(cases);
}

static void test_string_methods(void) {
    static const rcase cases[] = {
        {"{{ s.upper() }}|{{ s.lower() }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ "
         "s.strip(' H') }}|{{ s.title() }}",
         "{\"s\": \"  Hello wORLD  \"}",
         "  HELLO WORLD  |  hello world  |Hello wORLD|Hello wORLD  |  Hello wORLD|ello wORLD|  "
         "Hello World  "},
        {"{{ s.startswith('ab') }}{{ s.endswith('yz') }}{{ s.startswith(('x', 'a')) }}",
         "{\"s\": \"abxyz\"}", "TrueTrueTrue"},
        {"{{ s.split(',') }}{{ s.split(',', 1) }}{{ s.rsplit(',', 1) }}{{ ' a  b '.split() }}",
         "{\"s\": \"a,b,,c\"}", "['a', 'b', '', 'c']['a', 'b,,c']['a,b,', 'c']['a', 'b']"},
        {"{{ s.replace('a', 'X') }} {{ s.replace('a', 'X', 1) }} {{ 'ab'.replace('', '-') }}",
         "{\"s\": \"abab\"}", "XbXb Xbab -a-b-"},
        {"{{ s.find('\u00e9') }} {{ s.find('zz') }} {{ s.rfind('a') }} {{ s.count('a') }}",
         "{\"s\": \"a\u00e9bab\"}", "1 -1 3 2"},
        {"{{ ','.join(['a', 'b']) }} {{ '5'.zfill(3) }} {{ 'a b'.partition(' ') }} {{ "
         "'ab'.removeprefix('a') }}",
         NULL, "a,b 005 ('a', ' ', 'b') b"},
        {"{{ '{} and {}'.format('a', 1) }} {{ '{name}!'.format(name='n') }} {{ "
         "'{:>4}|{:.2f}|{:03d}'.format('r', 3.14159, 7) }}",
         NULL, "a and 1 n!    r|3.14|007"},
        {"{{ '%s-%d' % ('a', 3) }} {{ '%.2f' % 2.5 }} {{ '%5s|%-3s|' % ('r', 'l') }} {{ '%x %%' % "
         "255 }}",
         NULL, "a-3 2.50     r|l  | ff %"},
        {"{{ 'héllo wörld'|upper }} {{ 'ÄÖÜ'|lower }} {{ 'a\\nb\\r\\nc'.splitlines() }}", NULL,
         "HÉLLO WÖRLD äöü ['a', 'b', 'c']"},
    };
    RUN_CASES(cases);
}

static void test_globals(void) {
    static const rcase cases[] = {
        {"{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}", NULL,
         "[0, 1, 2] [1, 3, 5] [5, 3, 1]"},
        {"{{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", NULL, "{'a': 1, 'b': 'x'} 1"},
        {"{{ strftime_now('%Y-%m-%d %d %b %Y') }}", NULL, "2024-07-23 23 Jul 2024"},
        {"{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}", NULL,
         "TrueTrueFalse"},
        {"{% set range = 3 %}{{ range }}", NULL, "3"},
    };
    RUN_CASES(cases);
}

/* Every error names the line it comes from. */
static void test_error_messages(void) {
    EXPECT_ERROR("line1\n{{ x|nosuchfilter }}", NULL,
                 "chat template line 2: unknown filter 'nosuchfilter'");
    EXPECT_ERROR("a\nb\n{% if x is nosuchtest %}{% endif %}", NULL, "chat template line 3:");
    EXPECT_ERROR("{% if x %}\n{{ x|nosuch }}{% endif %}", "{\"x\": 1}",
                 "chat template line 2: unknown filter 'nosuch'");
    EXPECT_ERROR("\n\n{% frobnicate %}", NULL, "chat template line 3: unknown tag 'frobnicate'");
    EXPECT_ERROR("{% for x in y %}\nabc", NULL,
                 "chat template line 2: unexpected end of template: missing {% endfor %}");
    EXPECT_ERROR("{% if x %}{% endfor %}", NULL, "unknown tag 'endfor'");
    EXPECT_ERROR("\n{{ u.foo }}", NULL, "chat template line 2: 'u' is undefined");
    EXPECT_ERROR("{{ d.a.b }}", "{\"d\": {}}", "'dict object' has no attribute 'a'");
    EXPECT_ERROR("\n\n\n{{ raise_exception('bad input') }}", NULL,
                 "chat template line 4: bad input");
    EXPECT_ERROR("{{ 'a' +\n 1 }}", NULL, "can only concatenate str (not \"int\") to str");
    EXPECT_ERROR("{{ 1 / 0 }}", NULL, "division by zero");
    EXPECT_ERROR("{% set l = [1] %}\n{{ l.append(2) }}", NULL,
                 "chat template line 2: access to attribute 'append' of 'list' object is unsafe");
    EXPECT_ERROR("{% for x in 5 %}{% endfor %}", NULL, "'int' object is not iterable");
    EXPECT_ERROR("{{ 1 < 'a' }}", NULL, "'<' not supported between instances of 'int' and 'str'");
    EXPECT_ERROR("{% include 'x.html' %}", NULL, "'include' is not supported");
    EXPECT_ERROR("{{ 1 + }}", NULL, "chat template line 1: unexpected end of print statement");
    EXPECT_ERROR("{% set x = 1 %}{% set x.y = 2 %}", NULL,
                 "cannot assign attribute on non-namespace object");
    EXPECT_ERROR("{{ 'abc }}", NULL, "unterminated string");
    EXPECT_ERROR("{# open", NULL, "missing end of comment tag");
    EXPECT_ERROR("{% break %}", NULL, "'break' outside of a loop");
    EXPECT_ERROR("{{ (1 ]] }}", NULL, "unexpected ']', expected ')'");
    EXPECT_ERROR("{{ x }}", "[1]", "context must be a JSON object");
    EXPECT_ERROR("{{ x }}", "{\"x\": }", "invalid JSON at byte");
    EXPECT_ERROR("{{ x }}", "{\"x\": 1} extra", "extra data");
    EXPECT_ERROR("{{ 9223372036854775807 + 1 }}", NULL, "integer overflow");
    EXPECT_ERROR("{% macro f(a=1, b) %}{% endmacro %}", NULL,
                 "non-default argument follows default argument");
}

static void test_limits(void) {
    lm_chat_template_options o;
    lm_chat_template_options_default(&o);
    char *out;
    lm_error err = {0};

    o.max_loop_iterations = 100;
    CHECK(render_opts("{% for i in range(100) %}{% endfor %}", "{}", &o, &out, &err) == LM_OK);
    free(out);
    CHECK(render_opts("{% for i in range(60) %}{% endfor %}{% for i in range(60) %}{% endfor %}",
                      "{}", &o, &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "more than 100 loop iterations"), "%s", err.message);

    lm_chat_template_options_default(&o);
    o.max_output = 1000;
    CHECK(render_opts("{% for i in range(200) %}abcdefghij{% endfor %}", "{}", &o, &out, &err) !=
          LM_OK);
    CHECK_MSG(strstr(err.message, "limit of 1000 bytes"), "%s", err.message);
    CHECK(render_opts("{{ 'x' * 5000 }}", "{}", &o, &out, &err) != LM_OK);

    /* unbounded recursion stops at the macro depth */
    lm_chat_template_options_default(&o);
    CHECK(render_opts("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", &o, &out,
                      &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "macro calls nested deeper than 64"), "%s", err.message);
    /* exponential work stops at the step budget */
    o.max_steps = 200000;
    CHECK(render_opts("{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% "
                      "endmacro %}{{ f(0) }}",
                      "{}", &o, &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "too much work"), "%s", err.message);

    /* the wall clock is a safety net for work the step count underrates */
    lm_chat_template_options_default(&o);
    o.max_steps = (uint64_t)1 << 40;
    o.max_time_ms = 50;
    CHECK(render_opts("{% for i in range(1000000) %}{% set x = 'ab' * 1000 %}{% endfor %}", "{}",
                      &o, &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "time limit"), "%s", err.message);

    lm_chat_template_options_default(&o);
    o.max_memory = 1 << 20;
    CHECK(render_opts("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = "
                      "ns.l + [i] %}{% endfor %}",
                      "{}", &o, &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "memory limit"), "%s", err.message);

    /* deep nesting is refused at compile time, not by a stack overflow */
    char deep[4000];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int i = 0; i < 300; i++) deep[n++] = '-';
    n += (size_t)snprintf(deep + n, sizeof deep - n, "1 }}");
    CHECK(render(deep, "{}", &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "nested too deeply"), "%s", err.message);
    n = 0;
    for (int i = 0; i < 300; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, "{%% if 1 %%}");
    CHECK(render(deep, "{}", &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "nested too deeply"), "%s", err.message);
    n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ x");
    for (int i = 0; i < 300; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, ".a");
    n += (size_t)snprintf(deep + n, sizeof deep - n, " }}");
    CHECK(render(deep, "{}", &out, &err) != LM_OK);

    /* a self-containing namespace cannot be printed forever */
    CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "{}", &out, &err) !=
          LM_OK);
    CHECK_MSG(strstr(err.message, "nested too deeply"), "%s", err.message);

    /* template size */
    size_t big = ((size_t)1 << 20) + 1;
    char *src = malloc(big + 1);
    CHECK(src);
    memset(src, 'x', big);
    src[big] = 0;
    lm_chat_template *t = NULL;
    lm_status st = lm_chat_template_compile(src, big, &t, &err);
    free(src);
    CHECK(st != LM_OK && t == NULL);
    CHECK_MSG(strstr(err.message, "exceeds the limit"), "%s", err.message);

    /* invalid UTF-8 in the template */
    CHECK(render("{{ 'a\xff' }}", "{}", &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "not valid UTF-8"), "%s", err.message);
}

static void test_cjson_context(void) {
    lm_error err = {0};
    lm_chat_template *t;
    const char *tpl =
        "{{ n }} {{ f }} {{ r }} {{ s }} {{ l|tojson }} {{ bos_token }}{{ eos_token }}";
    CHECK_OK(lm_chat_template_compile(tpl, strlen(tpl), &t, &err), &err);
    CHECK_OK(lm_chat_template_set_special_tokens(t, "<s>", NULL, &err), &err);
    cJSON *ctx = cJSON_CreateObject();
    cJSON_AddNumberToObject(ctx, "n", 3);
    cJSON_AddNumberToObject(ctx, "f", 2.5);
    cJSON_AddItemToObject(ctx, "r", cJSON_CreateRaw("1.0"));
    cJSON_AddStringToObject(ctx, "s", "h\xc3\xa9");
    cJSON *l = cJSON_AddArrayToObject(ctx, "l");
    cJSON_AddItemToArray(l, cJSON_CreateTrue());
    cJSON_AddItemToArray(l, cJSON_CreateNull());
    char *out;
    size_t len;
    lm_status st = lm_chat_template_render(t, ctx, &out, &len, &err);
    cJSON_Delete(ctx);
    lm_chat_template_free(t);
    CHECK_OK(st, &err);
    CHECK_MSG(strcmp(out, "3 2.5 1.0 hé [true, null] <s>") == 0, "got [%s]", out);
    free(out);
}

typedef struct {
    const lm_chat_template *t;
    const char *ctx;
    const char *want;
    int ok;
} thread_job;

static void *render_many(void *arg) {
    thread_job *job = arg;
    job->ok = 1;
    for (int i = 0; i < 200 && job->ok; i++) {
        char *out;
        size_t len;
        lm_error err = {0};
        if (lm_chat_template_render_json(job->t, job->ctx, strlen(job->ctx), NULL, &out, &len,
                                         &err) != LM_OK) {
            job->ok = 0;
            break;
        }
        if (strcmp(out, job->want) != 0) job->ok = 0;
        free(out);
    }
    return NULL;
}

/* One compiled template rendered from four threads at once gives each its own right answer. */
static void test_threads(void) {
    const char *tpl = "{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s ~ "
                      "m.content|upper %}{% endfor %}"
                      "{{ ns.s }}{{ ' done' }}{{ [1, 2]|tojson }}";
    lm_error err = {0};
    lm_chat_template *t;
    CHECK_OK(lm_chat_template_compile(tpl, strlen(tpl), &t, &err), &err);
    thread_job jobs[4] = {
        {t, "{\"messages\": [{\"content\": \"a\"}, {\"content\": \"b\"}]}", "AB done[1, 2]", 0},
        {t, "{\"messages\": [{\"content\": \"x\"}]}", "X done[1, 2]", 0},
        {t, "{\"messages\": []}", " done[1, 2]", 0},
        {t,
         "{\"messages\": [{\"content\": \"\u00e9\"}, {\"content\": \"q\"}, {\"content\": \"r\"}]}",
         "\u00c9QR done[1, 2]", 0},
    };
    pthread_t th[4];
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, render_many, &jobs[i]) == 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    lm_chat_template_free(t);
    for (int i = 0; i < 4; i++) CHECK_MSG(jobs[i].ok, "thread %d rendered a wrong prompt", i);
}

int main(void) {
    RUN_TEST(test_whitespace_control);
    RUN_TEST(test_printing);
    RUN_TEST(test_literals);
    RUN_TEST(test_operators);
    RUN_TEST(test_access_and_slices);
    RUN_TEST(test_statements);
    RUN_TEST(test_macros);
    RUN_TEST(test_filters);
    RUN_TEST(test_tests);
    RUN_TEST(test_string_methods);
    RUN_TEST(test_globals);
    RUN_TEST(test_error_messages);
    RUN_TEST(test_limits);
    RUN_TEST(test_cjson_context);
    RUN_TEST(test_threads);
    return test_summary("test_jinja");
}
