"""Structured outputs through `loom serve` on the bundled model: for a corpus
of JSON schemas (nested objects, arrays, enums, anyOf, $ref, recursion),
sampling at temperature 1 over many seeds always yields content that parses
and validates against the schema (checked with the independent python3
jsonschema validator, formats included); the JSON is compact by default
(one optional space after ':' and ',', nothing elsewhere), any whitespace
with disable_any_whitespace false, its gaps matching
guided_whitespace_pattern where given; json_object, guided_regex, guided_choice and
structured_outputs likewise; bad response_format values and unsupported
schema features are 400s naming them; a forced tool call's arguments
validate against the tool's parameters.  Prints
"server_structured: N passed, M failed"."""
import http.client
import json
import re
import subprocess
import sys

import jsonschema

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)


def start(binary, model):
    p = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--served-model-name", "m",
                          "--max-num-seqs", "8"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        line = p.stderr.readline().decode()
        if not line:
            raise RuntimeError("server did not start")
        m = re.search(r"on http://[0-9.]+:(\d+)", line)
        if m:
            return p, int(m.group(1))


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"},
                                      "ok": {"type": "boolean"}},
     "required": ["name", "age", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {"x": {"type": "number"},
                                                                                   "y": {"type": "number"}},
                                                "required": ["x", "y"], "additionalProperties": False},
                                      "label": {"enum": ["a", "b", "c"]}},
     "required": ["point"], "additionalProperties": False},
    {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
    {"anyOf": [{"type": "null"}, {"type": "integer"}, {"type": "string", "pattern": "^[a-z]{2,4}$"}]},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"enum": [1, 2, 3]},
                                                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                 "maxItems": 2}},
                        "required": ["v"], "additionalProperties": False}},
     "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"const": "t"}, "maxItems": 2},
                                      "mode": {"type": ["string", "null"], "maxLength": 3}},
     "required": ["tags", "mode"], "additionalProperties": False},
    # issue 52: the keywords users write (annotations ignored; formats, oneOf,
    # allOf, bounds of any value, pattern with lengths, patternProperties,
    # exact consts)
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "t", "x-kind": "demo", "readonly": True,
     "type": "object", "properties": {
         "when": {"type": "string", "format": "date-time"},
         "id": {"type": "string", "format": "uuid"},
         "ip": {"type": "string", "format": "ipv4"},
         "kind": {"oneOf": [{"type": "integer", "minimum": -3.5, "exclusiveMaximum": 12}, {"type": "string", "maxLength": 4}]},
         "price": {"allOf": [{"type": "number", "minimum": 0.25}, {"maximum": 99.5}]},
         "code": {"type": "string", "pattern": "^[A-Z][a-z0-9]*$", "minLength": 2, "maxLength": 5},
         "big": {"const": 9007199254740992},
         "extra": {"type": "object", "patternProperties": {"^x_[a-z]+$": {"type": "integer", "multipleOf": 3}},
                   "additionalProperties": False, "maxProperties": 2}},
     "required": ["when", "id", "ip", "kind", "price", "code", "big"], "additionalProperties": False},
]
FORMATS = jsonschema.FormatChecker()

SEEDS = 8


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(r"^%s\{[^}]*\} ([0-9.e+-]+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def gaps(text):
    """The whitespace between a JSON text's tokens, each with the byte before it."""
    out, i, in_string = [], 0, False
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in " \t\n\r":
            j = i
            while j < len(text) and text[j] in " \t\n\r":
                j += 1
            out.append((text[i - 1] if i else "", text[i:j]))
            i = j
            continue
        i += 1
    return out


def compact(text):
    return all(ws == " " and before in ":," for before, ws in gaps(text))


def ask(port, extra, seed, max_tokens=600):
    body = {"model": "m", "messages": [{"role": "user", "content": "Give me some data."}],
            "temperature": 1.0, "seed": seed, "max_tokens": max_tokens}
    body.update(extra)
    return post(port, body)


def main():
    binary, model = sys.argv[1], sys.argv[2]
    seeds = 3 if "--quick" in sys.argv else SEEDS
    server, port = start(binary, model)
    try:
        masks0, seconds0 = metric(port, "loom_grammar_masks_total"), metric(port, "loom_grammar_seconds_total")
        check(masks0 == 0 and seconds0 == 0, "grammar counters start at 0: %s %s" % (masks0, seconds0))
        status, r = ask(port, {}, 0, 8)
        check(status == 200 and metric(port, "loom_grammar_masks_total") == 0,
              "an unconstrained request computes no mask")
        for i, schema in enumerate(SCHEMAS):
            rf = {"type": "json_schema", "json_schema": {"name": "s%d" % i, "schema": schema, "strict": True}}
            bad = []
            for seed in range(seeds):
                status, r = ask(port, {"response_format": rf}, seed)
                if status != 200:
                    bad.append("status %d %s" % (status, r))
                    continue
                ch = r["choices"][0]
                try:
                    jsonschema.validate(json.loads(ch["message"]["content"]), schema, format_checker=FORMATS)
                    if not compact(ch["message"]["content"]):
                        bad.append("not compact: %r" % ch["message"]["content"])
                    if ch["finish_reason"] != "stop":
                        bad.append("finish %s" % ch["finish_reason"])
                except Exception as e:  # parse or validation error
                    bad.append("%r: %s" % (ch["message"]["content"], str(e).splitlines()[0]))
            check(not bad, "schema %d: %s" % (i, bad[:2]))

        # json_object, the vLLM fields
        status, r = ask(port, {"response_format": {"type": "json_object"}}, 1)
        check(status == 200 and isinstance(json.loads(r["choices"][0]["message"]["content"]), dict), "json_object")
        status, r = ask(port, {"guided_regex": "[0-9]{3}-[a-z]{2}"}, 2)
        check(status == 200 and re.fullmatch("[0-9]{3}-[a-z]{2}", r["choices"][0]["message"]["content"]), "guided_regex")
        status, r = ask(port, {"guided_choice": ["left", "right"]}, 3)
        check(status == 200 and r["choices"][0]["message"]["content"] in ("left", "right"), "guided_choice")
        status, r = ask(port, {"structured_outputs": {"choice": ["up", "down"]}}, 4)
        check(status == 200 and r["choices"][0]["message"]["content"] in ("up", "down"), "structured_outputs.choice")
        status, r = ask(port, {"guided_json": SCHEMAS[0]}, 5)
        check(status == 200 and jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), SCHEMAS[0]) is None,
              "guided_json")
        status, r = ask(port, {"response_format": {"type": "text"}}, 6, 5)
        check(status == 200, "response_format text")

        # whitespace: any with vLLM's disable_any_whitespace false, the gaps
        # of guided_whitespace_pattern where given (every gap matches it)
        rf = {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMAS[1]}}
        for extra, gap_ok in [({"disable_any_whitespace": False}, lambda ws: len(ws) <= 16 and not ws.strip()),
                              ({"structured_outputs": {"disable_any_whitespace": False}},
                               lambda ws: len(ws) <= 16 and not ws.strip()),
                              ({"guided_whitespace_pattern": "\\n {0,2}"}, lambda ws: re.fullmatch("\n {0,2}", ws)),
                              ({"disable_any_whitespace": True}, lambda ws: ws == " ")]:
            bad = []
            for seed in range(seeds):
                status, r = ask(port, dict(extra, response_format=rf), seed)
                content = r["choices"][0]["message"]["content"] if status == 200 else ""
                try:
                    jsonschema.validate(json.loads(content), SCHEMAS[1])
                    bad += [ws for _, ws in gaps(content) if not gap_ok(ws)]
                except Exception as e:
                    bad.append("%d %r %s" % (status, content, e))
            check(not bad, "whitespace %s: %s" % (json.dumps(extra), bad[:3]))
        # with the pattern, every gap is a newline and up to two spaces: the first one too
        status, r = ask(port, {"guided_whitespace_pattern": "\n {0,2}", "response_format": rf}, 1)
        check(status == 200 and r["choices"][0]["message"]["content"].startswith("{\n"),
              "a whitespace pattern that must match something: %s" % (r if status != 200 else r["choices"][0]["message"]["content"][:40]))

        # 400s naming what is wrong
        for extra, words in [({"response_format": 5}, "response_format"),
                             ({"response_format": {"type": "xml"}}, "json_schema"),
                             ({"response_format": {"type": "json_schema"}}, "json_schema"),
                             ({"response_format": {"type": "json_schema", "json_schema": {
                                 "name": "x", "schema": {"type": "string", "format": "color"}}}}, "'format' \"color\" is not supported"),
                             ({"response_format": {"type": "json_schema", "json_schema": {
                                 "name": "x", "schema": {"$recursiveRef": "#"}}}}, "'$recursiveRef' is not supported"),
                             ({"guided_json": {"type": "object"}, "guided_whitespace_pattern": 3}, "guided_whitespace_pattern"),
                             ({"guided_json": {"type": "object"}, "disable_any_whitespace": "no"}, "disable_any_whitespace"),
                             ({"guided_json": {"type": "object"}, "guided_whitespace_pattern": "(?=a)"}, "whitespace pattern"),
                             ({"guided_regex": "(?=a)"}, "guided_regex"),
                             ({"guided_choice": []}, "guided_choice"),
                             ({"structured_outputs": {"grammar": "root ::= x"}}, "rule `x` is used but never defined"),
                             ({"guided_regex": "a", "guided_choice": ["a"]}, "give one")]:
            status, r = ask(port, extra, 1, 5)
            msg = (r or {}).get("error", {}).get("message", "")
            check(status == 400 and words in msg, "400 for %s: %d %s" % (json.dumps(extra)[:80], status, msg))

        # a forced call's arguments follow the tool's parameters
        params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                   "days": {"type": "integer"}},
                  "required": ["city", "days"], "additionalProperties": False}
        tools = [{"type": "function", "function": {"name": "forecast", "strict": True, "parameters": params}}]
        bad = []
        for seed in range(seeds):
            status, r = ask(port, {"tools": tools, "tool_choice": {"type": "function", "function": {"name": "forecast"}}},
                            seed)
            try:
                call = r["choices"][0]["message"]["tool_calls"][0]["function"]
                jsonschema.validate(json.loads(call["arguments"]), params)
                if call["name"] != "forecast":
                    bad.append(call["name"])
            except Exception as e:
                bad.append("%d %s: %s" % (status, json.dumps(r)[:200], e))
        check(not bad, "forced call arguments: %s" % bad[:2])
        masks, seconds = metric(port, "loom_grammar_masks_total"), metric(port, "loom_grammar_seconds_total")
        check(masks is not None and masks >= 100 and seconds is not None and seconds > 0,
              "grammar counters in /metrics: %s masks, %s s" % (masks, seconds))
    finally:
        server.terminate()
        server.wait(timeout=30)
    print("server_structured: %d passed, %d failed" % (passed, failed))


main()
