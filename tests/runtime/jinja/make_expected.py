#!/usr/bin/env python3
# Renders every template here with every conversation of cases.json through
# Python's jinja2, set up as Hugging Face transformers renders chat templates
# (trim_blocks, lstrip_blocks, loop controls, tojson without ASCII escaping,
# raise_exception), and writes expected.json: the reference test_jinja.c
# compares kvtier's interpreter with byte for byte. Run it again after adding
# a template or a case: python3 make_expected.py
import glob, json, os
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = os.path.dirname(os.path.abspath(__file__))

def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
cases = json.load(open(os.path.join(here, "cases.json"), encoding="utf-8"))
out = []
for path in sorted(glob.glob(os.path.join(here, "*.jinja"))):
    name = os.path.basename(path)[:-6]
    tmpl = env.from_string(open(path, encoding="utf-8").read())
    for case in cases:
        v = dict(case["vars"], bos_token="<s>", eos_token="</s>")
        try:
            out.append({"template": name, "case": case["name"], "output": tmpl.render(**v)})
        except Exception as e:  # the interpreter must fail here too
            out.append({"template": name, "case": case["name"], "error": str(e)})
with open(os.path.join(here, "expected.json"), "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(len(out), "renderings,", sum("error" in o for o in out), "errors")
