#!/usr/bin/env python3
"""Writes tests/data/templates/glm-cases.json: each GLM template of this
folder rendered by python3-jinja2 (configured as transformers configures it,
tests/jinja_diff.py's make_env) over jinja_diff.py's GLM conversations.
tests/test_chat_template.c renders the same cases with loom and compares the
bytes.  Conversations where Jinja2 raises are kept with "error": true.

usage: python3 tests/data/templates/make_cases.py   (from the repository root)
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", ".."))
import jinja_diff  # noqa: E402  (tests/jinja_diff.py)

cases = []
for tname, template in jinja_diff.repo_templates(os.path.join(here, "..", "..", "..")):
    for cname, ctx in jinja_diff.GLM_CONVERSATIONS:
        ok, rendered = jinja_diff.render_jinja(template, ctx)
        case = {"template": tname + ".jinja", "name": cname, "context": ctx}
        if ok:
            case["rendered"] = rendered
        else:
            case["error"] = True
        cases.append(case)
with open(os.path.join(here, "glm-cases.json"), "w", encoding="utf-8") as f:
    json.dump(cases, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"{len(cases)} cases")
