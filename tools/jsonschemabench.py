#!/usr/bin/env python3
"""JSON schemas as users write them, through loom's grammar compiler.

For each schema of each JSONSchemaBench subset (guidance-ai/jsonschemabench,
its data/ folder), bench/json_schema_check compiles it (loom_grammar_compile
with its cost check) and samples random complete answers from the grammar's
automaton; every answer is validated with python3-jsonschema (the validator
the schema's $schema names, 2020-12 by default, with format checking: the
library's checkers plus the strict ones below for the formats it leaves
unchecked).  Per subset: schemas answered (compiled), complete answers that
break their schema (must be 0), compile time.

With --cases FILE, a corpus of {"description", "schema", "data": [...]}:
each schema must compile, each instance is validated by the library (the
reference) and fed to the grammar: an invalid one accepted is a bug, a
valid one refused a narrowing (reported; --strict-valid makes it a
failure), and the sampled answers must validate (tests/data/jsonschema).

With --suite, the same for the JSON-Schema-Test-Suite's draft2020-12 groups:
per group, compiled or refused; for compiled groups, each test's data is fed
to the grammar (compact, its keys in the schema's property order): a valid
instance refused is a narrowing (counted), an invalid instance accepted is
a bug (must be 0), and the sampled answers must validate.

Either data folder may be a checkout or a bare git directory (read with git
cat-file; files a snapshot lacks are skipped).

usage: tools/jsonschemabench.py [--bench DIR] [--suite DIR] [--sample N]
       [--samples K] [--seed S] [--build build] [--json OUT]
  --sample N: a fixed seeded sample of N schemas per subset (0: all)
Exit status 1 when an answer breaks its schema or an invalid instance is
accepted.
"""
import argparse
import datetime
import json
import os
import random
import re
import statistics
import subprocess
import sys
import urllib.parse

import jsonschema


# ---- format checkers the library lacks without optional packages, written
# from the RFCs (independently of loom's own regular expressions)

def _date_ok(s):
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", s)
    if not m:
        return False
    try:
        datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return True


def _time_ok(s):
    m = re.fullmatch(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))", s)
    if not m:
        return False
    if int(m[1]) > 23 or int(m[2]) > 59 or int(m[3]) > 60:
        return False
    if m[6] is not None and (int(m[6]) > 23 or int(m[7]) > 59):
        return False
    return True


def _date_time_ok(s):
    parts = re.split(r"[Tt]", s, maxsplit=1)
    return len(parts) == 2 and _date_ok(parts[0]) and _time_ok(parts[1])


def _hostname_ok(s):
    if not s or len(s) > 253:
        return False
    return all(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", label) for label in s.split("."))


def _uri_ok(s):
    if re.search(r"[\s<>\"{}|\\^`]", s):
        return False
    parts = urllib.parse.urlsplit(s)
    return bool(parts.scheme) and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme) is not None


def _uri_reference_ok(s):
    return not re.search(r"[\s<>\"{}|\\^`]", s)


def _duration_ok(s):
    m = re.fullmatch(r"P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", s)
    if not m or s == "P" or s.endswith("T"):
        return False
    return True


EXTRA_FORMATS = {"date": _date_ok, "time": _time_ok, "date-time": _date_time_ok, "hostname": _hostname_ok,
                 "uri": _uri_ok, "iri": _uri_ok, "uri-reference": _uri_reference_ok,
                 "iri-reference": _uri_reference_ok, "duration": _duration_ok}
_checkers = {}


def format_checker(cls):
    """The draft's own format checker (the library's checks for that draft),
    with the checks above for the formats it leaves unchecked."""
    if cls not in _checkers:
        fc = jsonschema.FormatChecker(formats=())
        fc.checkers = dict(cls.FORMAT_CHECKER.checkers)
        for name, fn in EXTRA_FORMATS.items():
            if name not in fc.checkers:
                fc.checks(name)(lambda instance, fn=fn: not isinstance(instance, str) or fn(instance))
        _checkers[cls] = fc
    return _checkers[cls]


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=format_checker(cls))


# ---- data

def list_files(root, prefix):
    """(path, read) of the .json files under root/prefix, a folder or a bare
    git dir; read() gives the text, or None where a snapshot lacks it."""
    if os.path.isdir(os.path.join(root, prefix)):
        out = []
        for dirpath, _, names in sorted(os.walk(os.path.join(root, prefix))):
            for name in sorted(names):
                if name.endswith(".json"):
                    path = os.path.join(dirpath, name)
                    out.append((os.path.relpath(path, root),
                                lambda path=path: open(path, encoding="utf-8").read()))
        return out
    listing = subprocess.run(["git", "--git-dir", root, "ls-tree", "-r", "HEAD", prefix],
                             capture_output=True, text=True, check=True).stdout
    out = []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        if path.endswith(".json"):
            def read(blob=meta.split()[2]):
                got = subprocess.run(["git", "--git-dir", root, "cat-file", "blob", blob], capture_output=True)
                return got.stdout.decode("utf-8", "replace") if got.returncode == 0 else None
            out.append((path, read))
    return out


def read_files(root, prefix):
    for path, read in list_files(root, prefix):
        text = read()
        if text is not None:
            yield path, text


class Checker:
    """bench/json_schema_check as a subprocess: a case a line."""

    def __init__(self, build):
        self.proc = subprocess.Popen([os.path.join(build, "bench", "json_schema_check")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, encoding="utf-8")

    def run(self, case):
        self.proc.stdin.write(json.dumps(case, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def refusal_keyword(error):
    """The keyword a refusal names (its first quoted word), else the start of its message."""
    m = re.search(r"'([^']+)'", error or "")
    if m and not m[1].startswith("JSON schema"):
        return m[1]
    return re.sub(r"^JSON schema:? ", "", error or "?")[:60]


def broken(v, answer):
    try:
        return next(iter(v.iter_errors(json.loads(answer))), None) is not None
    except (json.JSONDecodeError, ValueError):
        return True


def bench(args, checker, report):
    subsets = {}
    for path, read in list_files(args.bench, "data"):
        subsets.setdefault(path.split("/")[1], []).append((path, read))
    failed = False
    rows = []
    n_missing = [0]
    for name in sorted(subsets):
        files = subsets[name]
        if args.sample:
            files = random.Random(args.seed).sample(files, min(args.sample, len(files)))
        answered = invalid = answers = incomplete = validator_errors = 0
        times = []
        refusals = {}
        for path, read in files:
            text = read()
            try:
                schema = json.loads(text)
            except (TypeError, ValueError):  # absent from the snapshot, or not JSON
                n_missing[0] += 1
                continue
            res = checker.run({"schema_text": text, "samples": args.samples, "seed": args.seed})
            times.append(res.get("compile_ms", 0))
            if not res.get("compiled"):
                k = refusal_keyword(res.get("error"))
                refusals[k] = refusals.get(k, 0) + 1
                continue
            answered += 1
            incomplete += res.get("incomplete", 0)
            try:
                v = validator(schema)
                for answer in res["samples"]:
                    answers += 1
                    if broken(v, answer):
                        invalid += 1
                        failed = True
                        print(f"INVALID {path}: {answer[:300]}", file=sys.stderr)
            except Exception as e:  # the validator cannot read the schema (a bad regex, a remote $ref)
                validator_errors += 1
                print(f"validator error {path}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
        n = len(files) - n_missing[0]
        n_missing[0] = 0
        top = sorted(refusals.items(), key=lambda kv: -kv[1])[:5]
        rows.append({"subset": name, "schemas": n, "answered": answered, "answered_pct": 100.0 * answered / max(n, 1),
                     "answers": answers, "invalid": invalid, "incomplete_walks": incomplete,
                     "validator_errors": validator_errors,
                     "compile_ms_median": statistics.median(times) if times else 0,
                     "compile_ms_max": max(times) if times else 0, "refused_for": top})
    total = sum(r["schemas"] for r in rows)
    done = sum(r["answered"] for r in rows)
    print("| subset | schemas | answered | invalid answers / sampled | compile ms median / max | most refused for |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        why = ", ".join(f"{k} {c}" for k, c in r["refused_for"])
        print(f"| {r['subset']} | {r['schemas']} | {r['answered_pct']:.1f}% | {r['invalid']} / {r['answers']} | "
              f"{r['compile_ms_median']:.2f} / {r['compile_ms_max']:.1f} | {why} |")
    print(f"| all | {total} | {100.0 * done / max(total, 1):.1f}% | "
          f"{sum(r['invalid'] for r in rows)} / {sum(r['answers'] for r in rows)} | | |")
    report["bench"] = rows
    return failed


def ordered_like(data, schema):
    """data with its object keys in the schema's property order (loom writes
    properties in that order), recursively where the schema is plain."""
    if isinstance(data, dict) and isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        props = schema["properties"]
        keys = [k for k in props if k in data] + [k for k in data if k not in props]
        return {k: ordered_like(data[k], props.get(k, {})) for k in keys}
    if isinstance(data, list) and isinstance(schema, dict) and isinstance(schema.get("items"), dict):
        return [ordered_like(x, schema["items"]) for x in data]
    return data


def suite(args, checker, report):
    failed = False
    groups = compiled = valid_refused = valid_total = wrong_accepts = answers = invalid = 0
    refusals = {}
    by_file = {}  # the suite's file (a keyword, mostly): [compiled, groups]
    for path, text in read_files(args.suite, "tests/draft2020-12"):
        if "/optional/" in path:
            continue
        for g in json.loads(text):
            groups += 1
            tally = by_file.setdefault(os.path.basename(path)[:-5], [0, 0])
            tally[1] += 1
            schema = g["schema"]
            tests = g["tests"]
            instances = [json.dumps(ordered_like(t["data"], schema), separators=(",", ":"), ensure_ascii=False)
                         for t in tests]
            res = checker.run({"schema_text": json.dumps(schema), "instances": instances, "samples": args.samples,
                               "seed": args.seed})
            if not res.get("compiled"):
                k = refusal_keyword(res.get("error"))
                refusals[k] = refusals.get(k, 0) + 1
                continue
            compiled += 1
            tally[0] += 1
            for t, inst, ok in zip(tests, instances, res["accepted"]):
                if t["valid"]:
                    valid_total += 1
                    valid_refused += not ok
                elif ok:
                    wrong_accepts += 1
                    failed = True
                    print(f"ACCEPTED INVALID {path} / {g['description']} / {t['description']}: {inst[:200]}",
                          file=sys.stderr)
            try:
                v = validator(schema)
            except Exception:
                continue
            for answer in res["samples"]:
                answers += 1
                if broken(v, answer):
                    invalid += 1
                    failed = True
                    print(f"INVALID {path} / {g['description']}: {answer[:300]}", file=sys.stderr)
    top = sorted(refusals.items(), key=lambda kv: -kv[1])
    print(f"\nJSON-Schema-Test-Suite draft2020-12: {compiled} of {groups} groups compiled "
          f"({100.0 * compiled / max(groups, 1):.1f}%); valid instances accepted "
          f"{valid_total - valid_refused} of {valid_total}; invalid instances accepted {wrong_accepts}; "
          f"sampled answers invalid {invalid} of {answers}")
    print("refused for (groups): " + ", ".join(f"{k} {c}" for k, c in top))
    short = sorted(((f, c, n) for f, (c, n) in by_file.items() if c < n), key=lambda x: x[1] - x[2])
    print("files not all compiled (compiled/groups): " + ", ".join(f"{f} {c}/{n}" for f, c, n in short))
    report["suite"] = {"groups": groups, "compiled": compiled, "valid": valid_total, "valid_refused": valid_refused,
                       "invalid_accepted": wrong_accepts, "answers": answers, "invalid_answers": invalid,
                       "refused_for": top, "by_file": by_file}
    return failed


def cases(args, checker, report):
    failed = False
    n = refused_valid = 0
    with open(args.cases, encoding="utf-8") as f:
        corpus = json.load(f)
    for case in corpus:
        schema = case["schema"]
        v = validator(schema)
        instances = [json.dumps(ordered_like(d, schema), separators=(",", ":"), ensure_ascii=False) for d in case["data"]]
        res = checker.run({"schema_text": json.dumps(schema, ensure_ascii=False), "instances": instances,
                           "samples": args.samples, "seed": args.seed})
        n += 1
        if not res.get("compiled"):
            failed = True
            print(f"REFUSED {case['description']}: {res.get('error')}", file=sys.stderr)
            continue
        for d, inst, ok in zip(case["data"], instances, res["accepted"]):
            valid = next(iter(v.iter_errors(d)), None) is None
            if ok and not valid:
                failed = True
                print(f"ACCEPTED INVALID {case['description']}: {inst}", file=sys.stderr)
            if valid and not ok:
                refused_valid += 1
                failed |= args.strict_valid
                print(f"refused valid {case['description']}: {inst}", file=sys.stderr)
        for answer in res["samples"]:
            if broken(v, answer):
                failed = True
                print(f"INVALID {case['description']}: {answer[:300]}", file=sys.stderr)
    print(f"cases: {n} schemas, {refused_valid} valid instances refused, {'FAILED' if failed else 'ok'}")
    report["cases"] = {"schemas": n, "valid_refused": refused_valid, "failed": failed}
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", help="jsonschemabench: a checkout or bare git dir (its data/ folder)")
    ap.add_argument("--suite", help="JSON-Schema-Test-Suite: a checkout or bare git dir")
    ap.add_argument("--cases", help="a corpus of schemas and instances (tests/data/jsonschema/cases.json)")
    ap.add_argument("--strict-valid", action="store_true", help="--cases: a valid instance refused fails too")
    ap.add_argument("--sample", type=int, default=0, help="schemas per subset, a fixed seeded sample (0: all)")
    ap.add_argument("--samples", type=int, default=5, help="random answers per schema")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build", default=os.environ.get("LOOM_BUILD", "build"))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    checker = Checker(args.build)
    report = {}
    failed = False
    if args.bench:
        failed |= bench(args, checker, report)
    if args.suite:
        failed |= suite(args, checker, report)
    if args.cases:
        failed |= cases(args, checker, report)
    checker.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
