#!/usr/bin/env python3
"""Generate rust/mdr-sys/src/bindings.rs from include/mdr/*.h.

Usage: python3 rust/mdr-sys/generate.py [--check]

The headers are run through the C preprocessor (`cc -E`, cc from PATH or $CC)
so that the X-macro lists (MDR_STATUS_LIST, MDR_BUFFER_LIST) are expanded;
only the lines that come from include/mdr/ are kept. The object-like MDR_*
macros with an integer value come from `cc -dM -E`. Doc comments are the
headers' own comments, copied as text blocks.

--check: exit 1 when the checked-in bindings.rs differs from what the
headers give now (tests/abi.rs also checks the result against a C program).
Standard library only.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
INC = os.path.join(ROOT, "include")
HDR_DIR = os.path.join(INC, "mdr")
OUT = os.path.join(HERE, "src", "bindings.rs")
CC = os.environ.get("CC", "cc")

PRIM = {
    "void": "c_void",
    "char": "c_char",
    "signed char": "c_schar",
    "unsigned char": "c_uchar",
    "short": "c_short",
    "unsigned short": "c_ushort",
    "int": "c_int",
    "signed": "c_int",
    "signed int": "c_int",
    "unsigned": "c_uint",
    "unsigned int": "c_uint",
    "long": "c_long",
    "long int": "c_long",
    "unsigned long": "c_ulong",
    "long long": "c_longlong",
    "unsigned long long": "c_ulonglong",
    "float": "f32",
    "double": "f64",
    "_Bool": "bool",
    "bool": "bool",
    "size_t": "usize",
    "ptrdiff_t": "isize",
    "uint8_t": "u8",
    "uint16_t": "u16",
    "uint32_t": "u32",
    "uint64_t": "u64",
    "int8_t": "i8",
    "int16_t": "i16",
    "int32_t": "i32",
    "int64_t": "i64",
    "uintptr_t": "usize",
    "intptr_t": "isize",
}
RUST_KEYWORDS = {"type", "fn", "in", "ref", "mod", "match", "move", "self", "use", "impl", "loop", "box", "where", "crate", "dyn"}


def die(msg):
    sys.stderr.write("generate.py: %s\n" % msg)
    sys.exit(2)


def headers():
    return sorted(f for f in os.listdir(HDR_DIR) if f.endswith(".h"))


def preprocess():
    """The preprocessed umbrella header, only lines from include/mdr/, with
    the file each declaration comes from."""
    out = subprocess.run([CC, "-E", "-I", INC, os.path.join(HDR_DIR, "mdr.h")], capture_output=True, text=True)
    if out.returncode != 0:
        die("cc -E failed:\n" + out.stderr)
    keep, cur = [], None
    for line in out.stdout.splitlines():
        m = re.match(r'#\s*\d+\s+"([^"]+)"', line)
        if m:
            p = os.path.normpath(m.group(1))
            cur = os.path.basename(p) if os.path.dirname(os.path.abspath(p)) == HDR_DIR else None
            continue
        if cur and not line.startswith("#"):
            keep.append((cur, line))
    return keep


def macros():
    out = subprocess.run([CC, "-dM", "-E", "-I", INC, os.path.join(HDR_DIR, "mdr.h")], capture_output=True, text=True)
    if out.returncode != 0:
        die("cc -dM -E failed:\n" + out.stderr)
    raw = {}
    for line in out.stdout.splitlines():
        m = re.match(r"#define (MDR_\w+)(\s+(.*))?$", line)
        if m and m.group(3):
            raw[m.group(1)] = m.group(3).strip()
    vals = {}

    def ev(name, depth=0):
        if name in vals:
            return vals[name]
        e = raw[name]
        is_size = "(size_t)" in e
        e = e.replace("(size_t)", "").replace("(unsigned)", "")
        e = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", e)
        for ref in re.findall(r"\bMDR_\w+\b", e):
            if ref not in raw or depth > 8:
                return None
            v = ev(ref, depth + 1)
            if v is None:
                return None
            e = re.sub(r"\b%s\b" % ref, str(v[0]), e)
        if not re.fullmatch(r"[\d\s()+\-*/<>|&~]+", e):
            return None
        try:
            v = eval(e, {"__builtins__": {}}, {})
        except Exception:
            return None
        if not isinstance(v, int):
            return None
        vals[name] = (v, is_size)
        return vals[name]

    res = {}
    for name in raw:
        v = ev(name)
        if v is not None:
            res[name] = v
    return res


def comments_of(path):
    """(start, end, text) of every /* */ comment in a header."""
    src = open(path).read()
    res = []
    for m in re.finditer(r"/\*(.*?)\*/", src, re.S):
        body = m.group(1)
        lines = [re.sub(r"^\s*\* ?", "", l) if i else l.strip() for i, l in enumerate(body.split("\n"))]
        text = "\n".join(lines).strip()
        res.append((m.start(), m.end(), text))
    return src, res


class Header:
    def __init__(self, name):
        self.name = name
        self.src, self.comments = comments_of(os.path.join(HDR_DIR, name))

    def doc_before(self, pattern):
        """The comment right above the first match of `pattern`: it ends
        before the match, with only declarations (no blank line) between."""
        m = re.search(pattern, self.src)
        if not m:
            return None
        pos = self.src.rfind("\n", 0, m.start()) + 1
        best = None
        for s, e, t in self.comments:
            if e <= pos:
                best = (s, e, t)
        if not best:
            return None
        between = self.src[best[1]:pos]
        if "\n\n" in between or between.count("\n") > 6:
            return None
        return best[2]

    def trailing(self, pattern):
        """A comment on the same line after the first match of `pattern`."""
        m = re.search(pattern, self.src)
        if not m:
            return None
        end = self.src.find("\n", m.end())
        line = self.src[m.end():end]
        c = re.search(r"/\*(.*?)(\*/|$)", line)
        if not c:
            return None
        text = c.group(1).strip()
        if not c.group(2):  # continues on the next lines
            rest = self.src[end:self.src.find("*/", end)]
            text += " " + " ".join(l.strip() for l in rest.split("\n"))
        return " ".join(text.split())


def split_decls(lines):
    """Top-level declarations as (file, text); static inline functions are
    returned as ('inline', file, text)."""
    decls, buf, depth, f0 = [], [], 0, None
    text = []
    for f, line in lines:
        text.append((f, line))
    chars = []
    for f, line in text:
        for ch in line + "\n":
            chars.append((f, ch))
    i = 0
    cur, cur_file = "", None
    while i < len(chars):
        f, ch = chars[i]
        if cur_file is None and not ch.isspace():
            cur_file = f
        cur += ch
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and re.match(r"\s*static\b", cur):
                decls.append(("inline", cur_file, " ".join(cur.split())))
                cur, cur_file = "", None
        elif ch == ";" and depth == 0:
            d = " ".join(cur.split())
            if d.startswith('extern "C" {'):
                d = d[len('extern "C" {'):].strip()
            decls.append(("decl", cur_file, d))
            cur, cur_file = "", None
        i += 1
    return decls


class Gen:
    def __init__(self):
        self.enum_vals = {}  # constant -> (value, enum type)
        self.enums = []      # (name, file, [(const, value)])
        self.structs = []    # (name, file, [(field, rust type, c decl)])
        self.opaque = []     # (name, file)
        self.aliases = []    # (name, file, rust type)
        self.fnptrs = []     # (name, file, ret, [(pname, rust type)])
        self.funcs = []      # (name, file, ret, [(pname, rust type)])
        self.inlines = []    # (name, file, ret, params, call)
        self.known = set()

    def rtype(self, spec, ptrs):
        """spec: base specifiers (may hold const); ptrs: list of 'const'-flags
        after each '*' (outermost last)."""
        words = spec.split()
        base_const = "const" in words
        words = [w for w in words if w not in ("const", "struct", "enum", "volatile")]
        base = " ".join(words)
        if base in PRIM:
            t = PRIM[base]
        elif base in self.known:
            t = base
        else:
            die("unknown type %r" % base)
        pointee_const = base_const
        for star_const in ptrs:
            t = ("*const " if pointee_const else "*mut ") + t
            pointee_const = star_const
        return t

    def parse_declarator(self, d):
        """'const char *const *name[4]' -> (name, rust type)."""
        d = d.strip()
        arr = None
        m = re.search(r"\[\s*(\w+)\s*\]$", d)
        if m:
            arr = m.group(1)
            d = d[: m.start()].strip()
        m = re.match(r"^(.*?)\s*((?:\*\s*(?:const\s*)?)*)\s*(\w+)?$", d)
        spec, stars, name = m.group(1), m.group(2), m.group(3)
        words = spec.split()
        # "unsigned" with no name, or a type name taken as the name
        if name and (not words or all(w == "const" for w in words) or name in PRIM and not stars):
            spec, name = (spec + " " + name).strip(), None
        ptrs = [bool(s.strip()[1:].strip()) for s in re.findall(r"\*\s*(?:const)?\s*", stars)]
        t = self.rtype(spec, ptrs)
        if arr is not None:
            n = int(arr) if arr.isdigit() else self.enum_vals[arr][0]
            t = "[%s; %d]" % (t, n)
        return name, t

    def params(self, s):
        s = s.strip()
        if s in ("", "void"):
            return []
        res = []
        for i, p in enumerate(split_top(s)):
            name, t = self.parse_declarator(p)
            name = name or "arg%d" % i
            if name in RUST_KEYWORDS:
                name += "_"
            res.append((name, t))
        return res

    def ret(self, spec):
        spec = spec.strip()
        if spec == "void":
            return None
        _, t = self.parse_declarator(spec)
        return t

    def run(self, decls):
        for kind, f, d in decls:
            if kind == "inline":
                self.inline(f, d)
                continue
            d = d.rstrip(";").strip()
            if not d or d.startswith("extern") or d == "}":
                continue
            exported = False
            if d.startswith('__attribute__((visibility("default")))'):
                exported = True
                d = d[len('__attribute__((visibility("default")))'):].strip()
            if d.startswith("}"):  # the closing brace of extern "C"
                d = d[1:].strip()
                if not d:
                    continue
            m = re.match(r"typedef enum (\w+)\s*\{(.*)\}\s*(\w+)$", d)
            if m:
                self.enum(m.group(3), f, m.group(2))
                continue
            m = re.match(r"typedef struct (\w+)\s*\{(.*)\}\s*(\w+)$", d)
            if m:
                self.known.add(m.group(3))
                fields = []
                for fd in m.group(2).split(";"):
                    if fd.strip():
                        name, t = self.parse_declarator(fd)
                        fields.append((name, t))
                self.structs.append((m.group(3), f, fields))
                continue
            m = re.match(r"typedef struct (\w+) (\w+)$", d)
            if m:
                if m.group(2) not in self.known:  # C11 allows repeating a typedef
                    self.opaque.append((m.group(2), f))
                self.known.add(m.group(2))
                continue
            m = re.match(r"typedef (.*?)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$", d)
            if m:
                self.fnptrs.append((m.group(2), f, self.ret(m.group(1)), self.params(m.group(3))))
                self.known.add(m.group(2))
                continue
            m = re.match(r"typedef (.*)$", d)
            if m:
                name, t = self.parse_declarator(m.group(1))
                self.aliases.append((name, f, t))
                self.known.add(name)
                continue
            m = re.match(r"(.*?)\b(mdr_\w+)\s*\((.*)\)$", d)
            if m and exported:
                self.funcs.append((m.group(2), f, self.ret(m.group(1)), self.params(m.group(3))))
                continue
            die("cannot parse declaration in %s: %s" % (f, d))

    def enum(self, name, f, body):
        self.known.add(name)
        v, consts = -1, []
        for item in [x.strip() for x in body.split(",") if x.strip()]:
            if "=" in item:
                c, e = [x.strip() for x in item.split("=", 1)]
                v = self.const_expr(e)
                if v is None:
                    die("enum value %r of %s" % (e, c))
            else:
                c, v = item, v + 1
            consts.append((c, v))
            self.enum_vals[c] = (v, name)
        self.enums.append((name, f, consts))

    def const_expr(self, e):
        """An integer constant expression of literals (suffixes allowed),
        earlier enum constants, casts to integer types and operators."""
        e = re.sub(r"\(\s*(?:unsigned|int|size_t|uint32_t|uint64_t|long)(?:\s+\w+)*\s*\)", "", e)
        e = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", e)
        for ref in set(re.findall(r"\b[A-Za-z_]\w*\b", e)):
            if ref not in self.enum_vals:
                return None
            e = re.sub(r"\b%s\b" % ref, str(self.enum_vals[ref][0]), e)
        if not re.fullmatch(r"[\dxXa-fA-F\s()+\-*/<>|&~]+", e):
            return None
        try:
            v = eval(e, {"__builtins__": {}}, {})
        except Exception:
            return None
        return v if isinstance(v, int) else None

    def inline(self, f, d):
        m = re.match(r"static inline (.*?)\b(mdr_\w+)\s*\((.*?)\)\s*\{\s*return (mdr_\w+)\((.*)\);\s*\}$", d)
        if not m:
            die("cannot translate the inline function in %s: %s" % (f, d))
        ret = self.ret(m.group(1))
        self.inlines.append((m.group(2), f, ret, self.params(m.group(3)), m.group(4), [a.strip() for a in m.group(5).split(",")]))


def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def doc(text, indent=""):
    out = []
    for l in text.split("\n"):
        out.append(indent + ("/// " + l).rstrip())
    return "\n".join(out) + "\n"


def c_doc(h, pattern, head):
    text = h.doc_before(pattern) if h else None
    s = head
    if text:
        s += "\n\n```text\n" + text.replace("```", "'''") + "\n```"
    return s


def main():
    check = "--check" in sys.argv
    lines = preprocess()
    g = Gen()
    g.run(split_decls(lines))
    mac = macros()
    H = {n: Header(n) for n in headers()}
    o = []
    w = o.append
    w("// @generated by rust/mdr-sys/generate.py from include/mdr/*.h: do not edit.\n")
    w("// Regenerate with `python3 rust/mdr-sys/generate.py`; tests/abi.rs checks it\n")
    w("// against a C program built from the same headers.\n\n")
    w("use core::ffi::{c_char, c_int, c_uint, c_void};\n")
    w("#[allow(unused_imports)]\nuse core::ffi::{c_long, c_longlong, c_schar, c_short, c_uchar, c_ulong, c_ulonglong, c_ushort};\n\n")

    w("// ---- macros (object-like MDR_* with an integer value) ----\n\n")
    for name in sorted(mac):
        v, is_size = mac[name]
        t = "usize" if is_size or name not in ("MDR_VERSION_MAJOR", "MDR_VERSION_MINOR", "MDR_VERSION_PATCH", "MDR_VERSION_NUMBER") else "c_uint"
        hname = next((n for n in H if re.search(r"#define %s\b" % name, H[n].src)), None)
        w(doc(c_doc(H.get(hname), r"#define %s\b" % name, "`#define %s` (%s)." % (name, hname))))
        w("pub const %s: %s = %d;\n\n" % (name, t, v))

    w("// ---- opaque handles ----\n\n")
    for name, f in g.opaque:
        w(doc(c_doc(H[f], r"typedef struct %s %s;" % (name, name), "Opaque C type `%s` (%s); used only behind pointers." % (name, f))))
        w("#[repr(C)]\npub struct %s {\n    _private: [u8; 0],\n    _not_send_sync: core::marker::PhantomData<*mut u8>,\n}\n\n" % name)

    w("// ---- typedefs ----\n\n")
    for name, f, t in g.aliases:
        w(doc(c_doc(H[f], r"typedef [^;]*\b%s;" % name, "C typedef `%s` (%s)." % (name, f))))
        w("pub type %s = %s;\n\n" % (name, t))

    w("// ---- enums (C enums are int-sized; their constants follow) ----\n\n")
    for name, f, consts in g.enums:
        w(doc(c_doc(H[f], r"typedef enum %s\b" % name, "C enum `%s` (%s)." % (name, f))))
        w("pub type %s = c_int;\n" % name)
        for c, v in consts:
            tr = H[f].trailing(r"(?m)^\s*%s\b[^\n]*?(?=/\*|$)" % c)
            txt = "`%s` = %d (enum `%s`)." % (c, v, name)
            if tr:
                txt += " " + tr.replace("[", "\\[").replace("]", "\\]").replace("`", "'").replace("<", "&lt;")
            w(doc(txt))
            w("pub const %s: %s = %d;\n" % (c, name, v))
        w("\n")

    w("// ---- function pointer types ----\n\n")
    for name, f, ret, ps in g.fnptrs:
        w(doc(c_doc(H[f], r"typedef[^;]*\(\*%s\)" % name, "C function pointer type `%s` (%s)." % (name, f))))
        w("pub type %s = Option<unsafe extern \"C\" fn(%s)%s>;\n\n" % (
            name, ", ".join("%s: %s" % p for p in ps), " -> %s" % ret if ret else ""))

    w("// ---- structs ----\n\n")
    for name, f, fields in g.structs:
        w(doc(c_doc(H[f], r"typedef struct %s \{" % name, "C struct `%s` (%s)." % (name, f))))
        w("#[repr(C)]\n#[derive(Debug, Copy, Clone)]\npub struct %s {\n" % name)
        for fn_, t in fields:
            tr = H[f].trailing(r"\b%s\b[^\n;]*;" % re.escape(fn_))
            txt = "Field `%s`." % fn_
            if tr:
                txt += " " + tr.replace("[", "\\[").replace("]", "\\]").replace("`", "'").replace("<", "&lt;")
            w(doc(txt, "    "))
            w("    pub %s: %s,\n" % (fn_, t))
        w("}\n\n")

    w("// ---- functions ----\n\n")
    w("extern \"C\" {\n")
    for name, f, ret, ps in g.funcs:
        w(doc(c_doc(H[f], r"\b%s\s*\(" % name, "`%s` (%s)." % (name, f)), "    "))
        w("    pub fn %s(%s)%s;\n" % (name, ", ".join("%s: %s" % p for p in ps), " -> %s" % ret if ret else ""))
    w("}\n\n")

    w("// ---- the headers' static inline functions, translated ----\n\n")
    for name, f, ret, ps, call, args in g.inlines:
        w(doc("The header's inline `%s` (%s): calls `%s(%s)`.\n\n# Safety\nAs for `%s`." % (name, f, call, ", ".join(args), call)))
        w("#[inline]\npub unsafe fn %s(%s)%s {\n    %s(%s)\n}\n\n" % (
            name, ", ".join("%s: %s" % p for p in ps), " -> %s" % ret if ret else "", call, ", ".join(args)))

    w("// ---- tables for tests/abi.rs ----\n\n")
    w("/// Every function declared above: (name, argument count). For tests/abi.rs.\n#[doc(hidden)]\n")
    w("pub const FUNCTIONS: &[(&str, usize)] = &[\n")
    for name, f, ret, ps in g.funcs:
        w("    (\"%s\", %d),\n" % (name, len(ps)))
    w("];\n\n")
    w("/// (struct, field or \"\" for the struct, size or offset, alignment). For tests/abi.rs.\n#[doc(hidden)]\n")
    w("pub const LAYOUTS: &[(&str, &str, usize, usize)] = &[\n")
    for name, f, fields in g.structs:
        w("    (\"%s\", \"\", core::mem::size_of::<%s>(), core::mem::align_of::<%s>()),\n" % (name, name, name))
        for fn_, t in fields:
            w("    (\"%s\", \"%s\", core::mem::offset_of!(%s, %s), 0),\n" % (name, fn_, name, fn_))
    w("];\n\n")
    w("/// Every enum constant and macro above, with its value. For tests/abi.rs.\n#[doc(hidden)]\n")
    w("pub const CONSTANTS: &[(&str, i128)] = &[\n")
    for name, f, consts in g.enums:
        for c, v in consts:
            w("    (\"%s\", %s as i128),\n" % (c, c))
    for name in sorted(mac):
        w("    (\"%s\", %s as i128),\n" % (name, name))
    w("];\n\n")
    w("/// Every typedef above (aliases, enums, function pointers, structs, opaque): (name, size). For tests/abi.rs.\n#[doc(hidden)]\n")
    w("pub const TYPES: &[(&str, usize)] = &[\n")
    for name, f, t in g.aliases:
        w("    (\"%s\", core::mem::size_of::<%s>()),\n" % (name, name))
    for name, f, consts in g.enums:
        w("    (\"%s\", core::mem::size_of::<%s>()),\n" % (name, name))
    for name, f, ret, ps in g.fnptrs:
        w("    (\"%s\", core::mem::size_of::<%s>()),\n" % (name, name))
    w("];\n")
    text = "".join(o)
    if check:
        old = open(OUT).read() if os.path.exists(OUT) else ""
        if old != text:
            sys.stderr.write("generate.py --check: %s is out of date; run python3 rust/mdr-sys/generate.py\n" % OUT)
            sys.exit(1)
        print("generate.py --check: bindings.rs is up to date (%d functions)" % len(g.funcs))
        return
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(text)
    print("generate.py: wrote %s: %d functions, %d structs, %d enums, %d macros, %d inline" % (
        os.path.relpath(OUT, ROOT), len(g.funcs), len(g.structs), len(g.enums), len(mac), len(g.inlines)))


if __name__ == "__main__":
    main()
