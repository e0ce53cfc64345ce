"""GBNF grammars through `loom serve` on the bundled model (random-ish
weights: the guarantee must not rely on the model): vLLM's guided_grammar
and structured_outputs.grammar and llama-server's grammar, on chat and
completions, restrict sampling at temperature 1 to the grammar's language
over several seeds, checked by references written here (a set of strings,
a recursive-descent parser, code point ranges); bad grammars, Lark syntax
and conflicting constraints are 400s naming the problem.  Prints
"server_grammar: N passed, M failed"."""
import http.client
import json
import re
import subprocess
import sys

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


def ask(port, endpoint, extra, seed, max_tokens=60):
    body = {"model": "m", "temperature": 1.0, "seed": seed, "max_tokens": max_tokens}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": "Answer."}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = "The answer is"
        path = "/v1/completions"
    body.update(extra)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    r_json = json.loads(data) if data else None
    if r.status != 200:
        return r.status, r_json, None, None
    ch = r_json["choices"][0]
    text = ch["message"]["content"] if endpoint == "chat" else ch["text"]
    return r.status, r_json, text, ch["finish_reason"]


def fields(grammar):
    """The three request fields that carry a GBNF grammar."""
    return [("guided_grammar", {"guided_grammar": grammar}),
            ("structured_outputs.grammar", {"structured_outputs": {"grammar": grammar}}),
            ("grammar", {"grammar": grammar})]


YES_NO = 'root ::= ("yes" | "no") "."'

# nested lists of small numbers: context-free
LISTS = '''root ::= list "."
list ::= "[" (item (", " item)*)? "]"
item ::= [0-9]{1,3} | list
'''


def is_lists(s):
    """The reference parser of LISTS: True when s is in its language."""
    def lst(i):
        if i >= len(s) or s[i] != "[":
            return -1
        i += 1
        if i < len(s) and s[i] == "]":
            return i + 1
        while True:
            i = item(i)
            if i < 0:
                return -1
            if s.startswith(", ", i):
                i += 2
                continue
            return i + 1 if i < len(s) and s[i] == "]" else -1

    def item(i):
        if i < len(s) and s[i] == "[":
            return lst(i)
        j = i
        while j < len(s) and j - i < 3 and s[j].isdigit() and s[j] in "0123456789":
            j += 1
        return j if j > i else -1

    end = lst(0)
    return end == len(s) - 1 and s[-1] == "."


GREEK = 'root ::= [\\u03B1-\\u03C9]{2,5} ("!" | [^\\x00-\\x7F])'


def is_greek(s):
    return (3 <= len(s) <= 6 and all(0x3B1 <= ord(c) <= 0x3C9 for c in s[:-1])
            and (s[-1] == "!" or ord(s[-1]) >= 0x80))


def main():
    binary, model = sys.argv[1], sys.argv[2]
    seeds = 2 if "--quick" in sys.argv else 5
    server, port = start(binary, model)
    try:
        for endpoint in ("chat", "completions"):
            for name, extra in fields(YES_NO):
                bad = []
                for seed in range(seeds):
                    status, r, text, finish = ask(port, endpoint, extra, seed)
                    if status != 200 or text not in ("yes.", "no.") or finish != "stop":
                        bad.append((status, text, finish, r if status != 200 else None))
                check(not bad, "%s %s: %s" % (endpoint, name, bad[:2]))
        # recursion, on every field in turn
        stopped = 0
        bad = []
        for seed in range(3 * seeds):
            name, extra = fields(LISTS)[seed % 3]
            status, r, text, finish = ask(port, "chat", extra, seed, 120)
            if status != 200:
                bad.append((name, status, r))
            elif finish == "stop":
                stopped += 1
                if not is_lists(text):
                    bad.append((name, text))
        check(not bad and stopped > 0, "nested lists: %s, %d complete" % (bad[:2], stopped))
        bad = []
        for seed in range(seeds):
            status, r, text, finish = ask(port, "completions", {"guided_grammar": GREEK}, seed)
            if status != 200 or finish != "stop" or not is_greek(text):
                bad.append((status, text, finish))
        check(not bad, "code point classes: %s" % bad[:2])
        # the same grammar in two fields is one constraint; "" is none
        status, r, text, finish = ask(port, "chat", {"grammar": YES_NO, "guided_grammar": YES_NO}, 1)
        check(status == 200 and text in ("yes.", "no."), "the same grammar twice: %s %s" % (status, text))
        status, r, text, finish = ask(port, "chat", {"grammar": "", "guided_regex": "ab"}, 1)
        check(status == 200 and text == "ab", "an empty grammar is none: %s %s" % (status, text))

        # 400s naming what is wrong
        for extra, words in [({"guided_grammar": "root ::= x"}, "line 1 column 10: rule `x` is used but never defined"),
                             ({"grammar": "root ::= root \"a\" | \"a\""}, "left-recursive"),
                             ({"structured_outputs": {"grammar": "root ::= \"x\" root"}}, "matches no finite string"),
                             ({"guided_grammar": "?start: \"a\""}, "Lark grammar syntax"),
                             ({"guided_grammar": "start: \"a\" | \"b\""}, "Lark grammar syntax"),
                             ({"grammar": "root ::= <think> \"a\""}, "token references"),
                             ({"grammar": "root ::= \"a\"{5000}"}, "repetition count above 1000"),
                             ({"guided_grammar": "root ::= (\"a\"*){1000}"}, "GBNF grammar"),
                             ({"guided_grammar": 7}, "must be a string"),
                             ({"grammar": YES_NO, "guided_grammar": 'root ::= "x"'}, "different grammars"),
                             ({"grammar": YES_NO, "guided_regex": "a"}, "give one"),
                             ({"structured_outputs": {"grammar": YES_NO, "regex": "a"}}, "one of json, regex, choice, grammar"),
                             ({"guided_grammar": YES_NO, "response_format": {"type": "json_object"}}, "give one")]:
            for endpoint in ("chat", "completions"):
                status, r, text, finish = ask(port, endpoint, extra, 1, 5)
                msg = (r or {}).get("error", {}).get("message", "")
                check(status == 400 and words in msg,
                      "400 for %s on %s: %d %s" % (json.dumps(extra)[:80], endpoint, status, msg))
    finally:
        server.terminate()
        server.wait()
    print("server_grammar: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
