#!/usr/bin/env python3
# Renders every template of tests/runtime/jinja with every conversation of its
# cases.json through Python's jinja2, set up as Hugging Face transformers
# renders chat templates (trim_blocks, lstrip_blocks, loop controls, the
# {% generation %} tag, tojson without ASCII escaping, raise_exception and
# strftime_now), and writes expected.json there: the reference test_jinja.c
# and test_jinja_marks.c compare kvtier's interpreter with byte for byte. The
# templates are that folder's and those of its llama.cpp/ (real models'
# templates, see its SOURCES.md). strftime_now writes
# "@@strftime_now(FORMAT)@@", which the tests replace with the date of their
# own run. Run it again after adding a template or a case:
# python3 scripts/make_jinja_expected.py (it needs jinja2; the tests do not)
import glob, json, os
import jinja2
from jinja2.ext import Extension
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "runtime", "jinja")

def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

class Generation(Extension):
    """{% generation %}...{% endgeneration %}, Hugging Face's marker of assistant text: the body as it is."""
    tags = {"generation"}

    def parse(self, parser):
        line = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(line)

    def _body(self, caller):
        return caller()

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=["jinja2.ext.loopcontrols", Generation])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: "@@strftime_now(%s)@@" % fmt
cases = json.load(open(os.path.join(here, "cases.json"), encoding="utf-8"))
out = []
paths = sorted(glob.glob(os.path.join(here, "*.jinja"))) + sorted(glob.glob(os.path.join(here, "llama.cpp", "*.jinja")))
for path in paths:
    name = os.path.relpath(path, here)[:-6]
    try:
        tmpl = env.from_string(open(path, encoding="utf-8").read())
    except jinja2.exceptions.TemplateSyntaxError as e:  # every case must fail
        tmpl, parse_error = None, str(e)
    for case in cases:
        v = dict(case["vars"], bos_token="<s>", eos_token="</s>")
        try:
            if not tmpl:
                raise jinja2.exceptions.TemplateSyntaxError(parse_error, 0)
            out.append({"template": name, "case": case["name"], "output": tmpl.render(**v)})
        except Exception as e:  # the interpreter must fail here too
            out.append({"template": name, "case": case["name"], "error": str(e)})
with open(os.path.join(here, "expected.json"), "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(len(out), "renderings,", sum("error" in o for o in out), "errors")
