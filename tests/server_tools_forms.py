"""Forced and strict tool calls in the call form of the model's chat
template, through `loom serve` on a random-weights checkpoint (so nothing
but the grammar makes the calls valid): over several seeds and schemas
(strings raw or bounded, integers and numbers with bounds, booleans, enums,
formats and patterns, nested objects, arrays, optional parameters, a $ref
to $defs, a property without a type), tool_choice required and named give
arguments that validate against the tool's parameters (python3-jsonschema,
formats checked) with finish_reason tool_calls; parallel_tool_calls false
gives exactly one call, true one or more (all valid unless the last was cut
by max_tokens); a tool without strict is still forced (unconstrained, as
before); a streamed call is the call the same seed gives whole; the
Anthropic route (tool_choice any / tool, disable_parallel_tool_use) and the
Responses route (tool_choice required, parallel_tool_calls false) likewise.
Usage: server_tools_forms.py LOOM MODEL_DIR FORM [--quick]; FORM (json,
xml, glm) is the form the template must write, checked in the prompt the
server renders.  Prints "server_tools_forms[FORM]: N passed, M failed"."""
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


def post(port, path, body, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=json.dumps(body), headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    if "text/event-stream" in (r.getheader("Content-Type") or ""):
        return r.status, data.decode()
    return r.status, json.loads(data) if data else None


SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                      "ok": {"type": "boolean"}},
     "required": ["city", "days", "unit", "ok"], "additionalProperties": False},
    {"type": "object",
     "properties": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                              "required": ["x", "y"], "additionalProperties": False},
                    "label": {"type": "string", "enum": ["a b", "c < d", "e\nf"]},
                    "tags": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5},
                             "maxItems": 3},
                    "note": {"type": "string", "minLength": 1, "maxLength": 6}},
     "required": ["point", "label"], "additionalProperties": False},
    {"type": "object",
     "properties": {"when": {"type": "string", "format": "date"},
                    "id": {"type": "string", "pattern": "^[a-z]{3}[0-9]{2}$"},
                    "score": {"type": "number", "minimum": 0, "maximum": 10},
                    "retry": {"type": "boolean"}},
     "required": ["when", "id", "score"], "additionalProperties": False},
    {"type": "object", "$defs": {"level": {"type": "integer", "enum": [1, 2, 3]}},
     "properties": {"level": {"$ref": "#/$defs/level"}, "mixed": {"enum": [1, "two", None, True]},
                    "flag": {"type": ["boolean", "null"]},
                    "meta": {"type": "object", "properties": {"k": {"type": "string", "maxLength": 4}},
                             "required": ["k"], "additionalProperties": False}},
     "required": ["level", "mixed", "flag", "meta"], "additionalProperties": False},
]
CHECKER = jsonschema.FormatChecker()


def valid(arguments, schema):
    try:
        jsonschema.validate(arguments if isinstance(arguments, dict) else json.loads(arguments), schema,
                            format_checker=CHECKER)
        return None
    except Exception as e:  # noqa: BLE001 - the message is the point
        return str(e).splitlines()[0]


def tools_for(schema, strict=True):
    return [{"type": "function", "function": {"name": "act", "strict": strict, "parameters": schema}},
            {"type": "function", "function": {"name": "idle", "strict": strict, "parameters": {
                "type": "object", "properties": {"why": {"type": "string", "enum": ["none", "later"]}},
                "required": ["why"], "additionalProperties": False}}}]


def chat(port, extra, seed, max_tokens=400, stream=False):
    body = {"model": "m", "messages": [{"role": "user", "content": "Call a tool."}], "temperature": 1.0,
            "seed": seed, "max_tokens": max_tokens, "stream": stream}
    body.update(extra)
    return post(port, "/v1/chat/completions", body)


def streamed_calls(text):
    """The tool calls and finish_reason an SSE chat stream adds up to."""
    calls, finish = {}, None
    for line in text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ch = json.loads(line[6:])["choices"][0]
        finish = ch.get("finish_reason") or finish
        for d in ch.get("delta", {}).get("tool_calls") or []:
            c = calls.setdefault(d["index"], {"name": "", "arguments": ""})
            fn = d.get("function", {})
            c["name"] += fn.get("name") or ""
            c["arguments"] += fn.get("arguments") or ""
    return [calls[k] for k in sorted(calls)], finish


def schema_of(tools, name):
    return next(t["function"]["parameters"] for t in tools if t["function"]["name"] == name)


def forced_calls(port, seeds):
    """required and named, parallel off: one valid call, finish tool_calls."""
    for i, schema in enumerate(SCHEMAS):
        tools = tools_for(schema)
        bad = []
        for seed in range(seeds):
            for choice in ("required", {"type": "function", "function": {"name": "act"}}):
                status, r = chat(port, {"tools": tools, "tool_choice": choice, "parallel_tool_calls": False}, seed)
                try:
                    ch = r["choices"][0]
                    calls = ch["message"]["tool_calls"]
                    if ch["finish_reason"] != "tool_calls" or len(calls) != 1:
                        bad.append("finish %s, %d calls" % (ch["finish_reason"], len(calls)))
                        continue
                    fn = calls[0]["function"]
                    if choice != "required" and fn["name"] != "act":
                        bad.append("named act, got %s" % fn["name"])
                    err = valid(fn["arguments"], schema_of(tools, fn["name"]))
                    if err:
                        bad.append("%s %s: %s" % (fn["name"], fn["arguments"][:160], err))
                except Exception as e:  # noqa: BLE001
                    bad.append("%d %s: %s" % (status, json.dumps(r)[:200], e))
        check(not bad, "schema %d: forced calls valid, one each: %s" % (i, bad[:2]))


def parallel_calls(port, seeds):
    """parallel on: one or more calls, each valid (a last one cut by length aside)."""
    bad, most = [], 0
    for seed in range(seeds):
        tools = tools_for(SCHEMAS[0])
        status, r = chat(port, {"tools": tools, "tool_choice": "required"}, seed, max_tokens=600)
        try:
            ch = r["choices"][0]
            calls = ch["message"]["tool_calls"]
            most = max(most, len(calls))
            whole = calls if ch["finish_reason"] == "tool_calls" else calls[:-1]
            if not calls or ch["finish_reason"] not in ("tool_calls", "length"):
                bad.append("finish %s, %d calls" % (ch["finish_reason"], len(calls)))
            for c in whole:
                err = valid(c["function"]["arguments"], schema_of(tools, c["function"]["name"]))
                if err:
                    bad.append(err)
        except Exception as e:  # noqa: BLE001
            bad.append("%d %s: %s" % (status, json.dumps(r)[:200], e))
    check(not bad, "parallel calls valid: %s (at most %d calls)" % (bad[:2], most))


def not_strict(port, seeds):
    """A forced call to a tool without strict is the named call, unconstrained
    (cut by max_tokens as before): its name, finish tool_calls or length."""
    tools = tools_for(SCHEMAS[0], strict=False)
    bad = []
    for seed in range(seeds):
        status, r = chat(port, {"tools": tools, "tool_choice": {"type": "function", "function": {"name": "act"}},
                                "parallel_tool_calls": False}, seed, max_tokens=30)
        try:
            ch = r["choices"][0]
            if ch["message"]["tool_calls"][0]["function"]["name"] != "act" or \
                    ch["finish_reason"] not in ("tool_calls", "length"):
                bad.append(json.dumps(ch)[:200])
        except Exception as e:  # noqa: BLE001
            bad.append("%d %s: %s" % (status, json.dumps(r)[:200], e))
    check(not bad, "forced call to a tool not strict: %s" % bad[:2])


def streaming(port, seeds):
    """A streamed forced call is the call the same seed gives whole."""
    bad = []
    for seed in range(seeds):
        for schema in SCHEMAS[:2]:
            extra = {"tools": tools_for(schema), "tool_choice": "required", "parallel_tool_calls": False}
            _, whole = chat(port, extra, seed)
            status, text = chat(port, extra, seed, stream=True)
            try:
                calls, finish = streamed_calls(text)
                w = whole["choices"][0]
                want = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                        for c in w["message"]["tool_calls"]]
                if calls != want or finish != w["finish_reason"]:
                    bad.append("%s %s != %s %s" % (calls, finish, want, w["finish_reason"]))
            except Exception as e:  # noqa: BLE001
                bad.append("%d %s: %s" % (status, str(text)[:200], e))
    check(not bad, "streamed calls equal whole ones: %s" % bad[:1])


def anthropic(port, seeds):
    """/v1/messages: tool_choice any and tool, one tool_use whose input validates."""
    bad = []
    for i, schema in enumerate(SCHEMAS):
        tools = [{"name": "act", "strict": True, "input_schema": schema},
                 {"name": "idle", "strict": True, "input_schema": tools_for(schema)[1]["function"]["parameters"]}]
        for choice in ({"type": "any", "disable_parallel_tool_use": True},
                       {"type": "tool", "name": "act", "disable_parallel_tool_use": True}):
            for _ in range(seeds):
                status, r = post(port, "/v1/messages", {"model": "m", "max_tokens": 400, "temperature": 1.0,
                                                        "messages": [{"role": "user", "content": "Call a tool."}],
                                                        "tools": tools, "tool_choice": choice},
                                 {"anthropic-version": "2023-06-01"})
                try:
                    uses = [b for b in r["content"] if b["type"] == "tool_use"]
                    if r["stop_reason"] != "tool_use" or len(uses) != 1 or not uses[0]["id"].startswith("toolu_"):
                        bad.append("stop %s, %d tool_use" % (r["stop_reason"], len(uses)))
                        continue
                    if choice["type"] == "tool" and uses[0]["name"] != "act":
                        bad.append("tool act, got %s" % uses[0]["name"])
                    sch = schema if uses[0]["name"] == "act" else tools[1]["input_schema"]
                    err = valid(uses[0]["input"], sch)
                    if err:
                        bad.append("schema %d: %s" % (i, err))
                except Exception as e:  # noqa: BLE001
                    bad.append("%d %s: %s" % (status, json.dumps(r)[:200], e))
    check(not bad, "anthropic forced tool_use valid: %s" % bad[:2])


def responses(port, seeds):
    """/v1/responses: tool_choice required, parallel_tool_calls false: one valid function_call."""
    bad = []
    for schema in SCHEMAS:
        tools = [{"type": "function", "name": "act", "strict": True, "parameters": schema}]
        for _ in range(seeds):
            status, r = post(port, "/v1/responses", {"model": "m", "input": "Call a tool.", "tools": tools,
                                                     "tool_choice": "required", "parallel_tool_calls": False,
                                                     "max_output_tokens": 400, "temperature": 1.0, "store": False})
            try:
                calls = [o for o in r["output"] if o["type"] == "function_call"]
                if len(calls) != 1 or r["status"] != "completed":
                    bad.append("%s, %d calls" % (r["status"], len(calls)))
                    continue
                err = valid(calls[0]["arguments"], schema)
                if err:
                    bad.append(err)
            except Exception as e:  # noqa: BLE001
                bad.append("%d %s: %s" % (status, json.dumps(r)[:200], e))
    check(not bad, "responses forced function_call valid: %s" % bad[:2])


def form_in_prompt(port, form):
    """The template renders a call in the form this run is about."""
    msgs = [{"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "act", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    status, r = post(port, "/tokenize", {"model": "m", "messages": msgs, "return_token_strs": False})
    text = None
    if status == 200 and "tokens" in r:
        status2, d = post(port, "/detokenize", {"model": "m", "tokens": r["tokens"]})
        text = d.get("prompt") if status2 == 200 else None
    marks = {"json": "{\"name\": \"act\"", "xml": "<function=act>", "glm": "<tool_call>act"}
    check(text is not None and marks[form] in text, "the template writes the %s form: %s" % (form, (text or "")[-300:]))


def main():
    binary, model, form = sys.argv[1], sys.argv[2], sys.argv[3]
    seeds = 1 if "--quick" in sys.argv else 4
    server, port = start(binary, model)
    try:
        form_in_prompt(port, form)
        forced_calls(port, seeds)
        parallel_calls(port, seeds)
        not_strict(port, seeds)
        streaming(port, max(1, seeds // 2))
        anthropic(port, max(1, seeds // 2))
        responses(port, max(1, seeds // 2))
    finally:
        server.terminate()
        server.wait(timeout=30)
    print("server_tools_forms[%s]: %d passed, %d failed" % (form, passed, failed))


main()
