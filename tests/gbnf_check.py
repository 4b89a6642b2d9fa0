#!/usr/bin/env python3
"""Checks a text against one of llama.cpp's example grammars
(tests/reference/gbnf/NAME.gbnf) without kvtier's grammar code: json and
json_arr through Python's json module, list, chess, english and japanese
through regular expressions, arithmetic and c through small parsers written
here from the grammars (each parse yields every position a rule can end at,
so no choice is ever committed to too early).

usage: gbnf_check.py NAME FILE   exit 0 if FILE's UTF-8 text parses under NAME
       gbnf_check.py --self-test exit 0 if the checkers accept and refuse the
                                 texts below as the grammars do
"""
import json
import re
import sys

# ---- sets of end positions ---------------------------------------------------------------


def lit(s):
    return lambda t, i: {i + len(s)} if t.startswith(s, i) else set()


def cls(pat):
    r = re.compile(pat)
    return lambda t, i: {i + 1} if i < len(t) and r.fullmatch(t[i]) else set()


def seq(*ps):
    def f(t, i):
        cur = {i}
        for p in ps:
            cur = set().union(*(p(t, j) for j in cur))
        return cur

    return f


def alt(*ps):
    return lambda t, i: set().union(*(p(t, i) for p in ps))


def star(p):
    def f(t, i):
        seen, front = {i}, {i}
        while front:
            front = set().union(*(p(t, j) for j in front)) - seen
            seen |= front
        return seen

    return f


def plus(p):
    return seq(p, star(p))


def opt(p):
    return alt(p, lambda t, i: {i})


class Rules:
    """Named rules that may refer to each other, memoised per text."""

    def __init__(self):
        self.rules, self.memo, self.text = {}, {}, None

    def __call__(self, name):
        def f(t, i):
            if t is not self.text:
                self.text, self.memo = t, {}
            key = (name, i)
            if key not in self.memo:
                self.memo[key] = self.rules[name](t, i)
            return self.memo[key]

        return f


def arithmetic():
    r = Rules()
    ws = star(cls(r"[ \t\n]"))
    r.rules["ident"] = seq(cls("[a-z]"), star(cls("[a-z0-9_]")), ws)
    r.rules["num"] = seq(plus(cls("[0-9]")), ws)
    r.rules["term"] = alt(r("ident"), r("num"), seq(lit("("), ws, r("expr"), lit(")"), ws))
    r.rules["expr"] = seq(r("term"), star(seq(cls(r"[-+*/]"), r("term"))))
    return plus(seq(r("expr"), lit("="), ws, r("term"), lit("\n")))


def c_lang():
    r = Rules()
    ws = plus(cls(r"[ \t\n]"))
    dt, ident, expr, stmt = r("dataType"), r("identifier"), r("expression"), r("statement")
    block = seq(lit("{"), star(stmt), lit("}"))
    assign = seq(ident, ws, lit("="), ws, expr)
    r.rules["dataType"] = alt(seq(lit("int"), ws), seq(lit("float"), ws), seq(lit("char"), ws))
    r.rules["identifier"] = seq(cls("[a-zA-Z_]"), star(cls("[a-zA-Z_0-9]")))
    r.rules["argList"] = seq(expr, star(seq(lit(","), ws, expr)))
    cond = seq(expr, alt(*(lit(o) for o in ("<=", "<", "==", "!=", ">=", ">"))), expr)
    r.rules["statement"] = alt(
        seq(dt, assign, lit(";")),
        seq(assign, lit(";")),
        seq(ident, ws, lit("("), opt(r("argList")), lit(")"), lit(";")),
        seq(lit("return"), ws, expr, lit(";")),
        seq(lit("while"), lit("("), cond, lit(")"), block),
        seq(lit("for"), lit("("), alt(seq(dt, assign), assign), lit(";"), ws, cond, lit(";"), ws, assign, lit(")"),
            block),
        seq(lit("if"), lit("("), cond, lit(")"), block, opt(seq(lit("else"), block))),
        seq(lit("//"), star(cls("[^\n]")), lit("\n")),
        seq(lit("/*"), star(alt(cls("[^*]"), seq(lit("*"), cls("[^/]")))), lit("*/")),
    )
    r.rules["expression"] = seq(r("term"), star(seq(cls("[-+]"), r("term"))))
    r.rules["term"] = seq(r("factor"), star(seq(cls("[*/]"), r("factor"))))
    r.rules["factor"] = alt(
        ident,
        plus(cls("[0-9]")),
        seq(lit("-"), r("factor")),
        seq(ident, lit("("), opt(r("argList")), lit(")")),
        seq(lit("("), ws, expr, ws, lit(")")),
    )
    return star(seq(dt, ident, lit("("), opt(seq(dt, ident)), lit(")"), block))


def parser_check(p):
    return lambda t: len(t) in p(t, 0)


def regex_check(pattern):
    r = re.compile(pattern)
    return lambda t: r.fullmatch(t) is not None


def json_check(kind, exact_start=""):
    def f(t):
        try:
            v = json.loads(t)
        except ValueError:
            return False
        return isinstance(v, kind) and t.startswith(exact_start) and (kind is dict or t.endswith("]"))

    return f


EN = r"""[a-zA-Z0-9!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]"""
JP = "[\u3041-\u309f\u30a1-\u30ff\u3001-\u303e\u4e00-\u9fff]"
MOVE = r"(?:(?:[a-h]x)?[a-h][1-8](?:=[NBKQR])?|[NBKQR][a-h]?[1-8]?x?[a-h][1-8]|O-O(?:-O)?)[+#]?"
CHECKS = {
    "json": json_check(dict),
    "json_arr": json_check(list, "[\n"),
    "list": regex_check("(?:- [^\r\n\x0b\x0c\x85\u2028\u2029]+\n)+"),
    "english": regex_check(f"{EN}+(?:[ \t\n]{EN}+)*"),
    "japanese": regex_check(f"{JP}+(?:[ \t\n]{JP}+)*"),
    "chess": regex_check(f"1\\. {MOVE} {MOVE}\n(?:[1-9][0-9]?\\. {MOVE} {MOVE}\n)+"),
    "arithmetic": parser_check(arithmetic()),
    "c": parser_check(c_lang()),
}

SAMPLES = {  # name: (texts it accepts, texts it refuses)
    "json": (['{"a": [1, -2.5e3, true, null, "x\\u00e9"]} '], ["[1]", '{"a": 01}', "{} x"]),
    "json_arr": (["[\n]", '[\n1,\n{"a": []}]'], ["[1]", "[\n1]\n", "{}"]),
    "list": (["- a\n- b c\n"], ["", "- \n", "- a\u2028b\n"]),
    "english": (["Hi, you! [x]\tok"], ["", "a  b", "caf\u00e9"]),
    "japanese": (["\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c \u30ab"], ["", "abc", "\u3053  \u3053"]),
    "chess": (["1. e4 e5\n2. Nf3 Nc6\n3. O-O-O exd8=Q#\n"], ["1. e4 e5\n", "1. e9 e5\n2. a3 a4\n"]),
    "arithmetic": (["1+2= 3\nx*(y-1)= z\n", "a=b\n\n\n"], ["1+2\n", "1+2=3", "(1=1\n"]),
    "c": (
        ["", "int main(){return 0;}", "char g(){/* a*b */if(a==-b){f (1, x);}else{}for(i = 0; i<3; i = i+1){}}"],
        ["int main() {return 0;}", "int f(){return 0}", "int f(){/* open }"],
    ),
}


def main(argv):
    if argv[1:] == ["--self-test"]:
        bad = [(n, t, ok) for n, (good, refused) in SAMPLES.items() for ok, ts in ((True, good), (False, refused))
               for t in ts if CHECKS[n](t) != ok]
        for n, t, ok in bad:
            print(f"{n}: {t!r} should be {'accepted' if ok else 'refused'}")
        return 1 if bad or set(SAMPLES) != set(CHECKS) else 0
    with open(argv[2], encoding="utf-8", newline="") as f:
        text = f.read()
    if CHECKS[argv[1]](text):
        return 0
    print(f"{argv[1]}: {text!r} does not parse", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
