//! The declarations of `src/bindings.rs` against the C headers.
//!
//! 1. Names: the functions declared `MDR_API` in `include/mdr/*.h` are exactly
//!    the functions of `bindings.rs`.
//! 2. Signatures: a C program built from the same headers assigns each
//!    function to a pointer of the type `bindings.rs` gives it (argument
//!    count, argument and return types), and each function-pointer typedef
//!    likewise; it is compiled with `-Werror`, so any difference fails.
//! 3. Layout: the same program prints every struct's size, alignment and
//!    field offsets, every typedef's size and every constant's value, which
//!    must equal the Rust ones (`LAYOUTS`, `TYPES`, `CONSTANTS`, computed by
//!    rustc from the Rust declarations).
//! 4. Freshness: `generate.py --check` (when python3 is on PATH).
//!
//! Needs `cc` on PATH (or `$CC`).
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

const BINDINGS: &str = include_str!("../src/bindings.rs");

fn c_type(rust: &str) -> String {
    let t = rust.trim();
    if let Some(rest) = t.strip_prefix("*const ") {
        return format!("{} const *", c_type(rest));
    }
    if let Some(rest) = t.strip_prefix("*mut ") {
        return format!("{} *", c_type(rest));
    }
    match t {
        "usize" => "size_t",
        "isize" => "ptrdiff_t",
        "u8" => "uint8_t",
        "u16" => "uint16_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "i8" => "int8_t",
        "i16" => "int16_t",
        "i32" => "int32_t",
        "i64" => "int64_t",
        "c_int" => "int",
        "c_uint" => "unsigned",
        "c_char" => "char",
        "c_schar" => "signed char",
        "c_uchar" => "unsigned char",
        "c_short" => "short",
        "c_ushort" => "unsigned short",
        "c_long" => "long",
        "c_ulong" => "unsigned long",
        "c_longlong" => "long long",
        "c_ulonglong" => "unsigned long long",
        "c_void" => "void",
        "bool" => "_Bool",
        "f32" => "float",
        "f64" => "double",
        other => other,
    }
    .to_string()
}

/// "a: T, b: U" -> ["T", "U"] (types are never nested with commas here).
fn param_types(params: &str) -> Vec<String> {
    if params.trim().is_empty() {
        return vec![];
    }
    params.split(", ").map(|p| p.split_once(": ").expect(p).1.to_string()).collect()
}

/// (params, return type) of "NAME(PARAMS) -> RET" or "NAME(PARAMS)".
fn sig(rest: &str) -> (Vec<String>, String) {
    let open = rest.find('(').unwrap();
    let close = rest.rfind(')').unwrap();
    let params = param_types(&rest[open + 1..close]);
    let after = rest[close + 1..].trim().trim_end_matches(';').trim_end_matches('>');
    let ret = after.strip_prefix("-> ").map(|r| c_type(r.trim())).unwrap_or_else(|| "void".into());
    (params.iter().map(|p| c_type(p)).collect(), ret)
}

fn header_functions(inc: &PathBuf) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for e in std::fs::read_dir(inc.join("mdr")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().map_or(true, |x| x != "h") {
            continue;
        }
        let src = std::fs::read_to_string(&p).unwrap();
        let mut rest = src.as_str();
        while let Some(i) = rest.find("MDR_API ") {
            rest = &rest[i + 8..];
            let decl = &rest[..rest.find('(').unwrap()];
            if decl.contains('\n') && decl.trim_start().starts_with("__") {
                continue;
            }
            let name = decl.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).last().unwrap();
            if name.starts_with("mdr_") {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn names_match_the_headers() {
    let inc = PathBuf::from(env!("MDR_INCLUDE_DIR"));
    if !inc.join("mdr/mdr.h").exists() {
        println!("skipped: the headers at {} are not on this machine", inc.display());
        return;
    }
    let c = header_functions(&inc);
    let rust: BTreeSet<String> = mdr_sys::FUNCTIONS.iter().map(|(n, _)| n.to_string()).collect();
    let only_c: Vec<_> = c.difference(&rust).collect();
    let only_rust: Vec<_> = rust.difference(&c).collect();
    assert!(only_c.is_empty() && only_rust.is_empty(),
            "MDR_API functions missing from bindings.rs: {only_c:?}; declared in bindings.rs but not MDR_API: {only_rust:?} (run python3 rust/mdr-sys/generate.py)");
    assert!(rust.len() > 50, "only {} functions", rust.len());
}

#[test]
fn signatures_layouts_and_constants_match_a_c_program() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        panic!("abi: no C compiler `{cc}` on PATH: this check needs one (set CC)");
    }
    let inc = PathBuf::from(env!("MDR_INCLUDE_DIR"));
    let lib = PathBuf::from(env!("MDR_LIB_DIR"));
    if !inc.join("mdr/mdr.h").exists() {
        println!("skipped: the headers at {} are not on this machine", inc.display());
        return;
    }
    let mut prog = String::from(
        "#include <mdr/mdr.h>\n#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n\
         #pragma GCC diagnostic error \"-Wincompatible-pointer-types\"\nint main(void) {\n",
    );
    let mut nfn = 0;
    for line in BINDINGS.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("pub fn ") {
            let name = &rest[..rest.find('(').unwrap()];
            let (params, ret) = sig(rest);
            let params = if params.is_empty() { "void".to_string() } else { params.join(", ") };
            prog += &format!("  {{ {ret} (*p)({params}) = &{name}; (void)p; }}\n");
            nfn += 1;
        } else if let Some(rest) = l.strip_prefix("pub type ") {
            if let Some(i) = rest.find(" = Option<unsafe extern \"C\" fn") {
                let name = &rest[..i];
                let (params, ret) = sig(&rest[i + " = Option<unsafe extern \"C\" fn".len()..]);
                prog += &format!("  {{ {ret} (*q)({}) = 0; {name} p = q; (void)p; }}\n", params.join(", "));
            }
        }
    }
    assert_eq!(nfn, mdr_sys::FUNCTIONS.len(), "parsed {nfn} `pub fn` lines");
    for (ty, field, _, _) in mdr_sys::LAYOUTS {
        if field.is_empty() {
            prog += &format!("  printf(\"L {ty} - %zu %zu\\n\", sizeof({ty}), (size_t)_Alignof({ty}));\n");
        } else {
            prog += &format!("  printf(\"L {ty} {field} %zu 0\\n\", offsetof({ty}, {field}));\n");
        }
    }
    for (name, _) in mdr_sys::CONSTANTS {
        prog += &format!("  printf(\"C {name} %lld\\n\", (long long)({name}));\n");
    }
    for (name, _) in mdr_sys::TYPES {
        prog += &format!("  printf(\"T {name} %zu\\n\", sizeof({name}));\n");
    }
    prog += "  return 0;\n}\n";

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("abi");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&src, &prog).unwrap();
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", inc.display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lmdr")
        .output()
        .unwrap();
    assert!(out.status.success(), "the C program {} does not compile: the declarations disagree with the headers:\n{}",
            src.display(), String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    let mut c: BTreeMap<String, String> = BTreeMap::new();
    for l in text.lines() {
        let (k, v) = l.rsplit_once(' ').unwrap();
        if l.starts_with("L ") {
            let (k2, v2) = k.rsplit_once(' ').unwrap();
            c.insert(k2.to_string(), format!("{v2} {v}"));
        } else {
            c.insert(k.to_string(), v.to_string());
        }
    }
    let mut bad = Vec::new();
    for (ty, field, v, a) in mdr_sys::LAYOUTS {
        let key = format!("L {ty} {}", if field.is_empty() { "-" } else { field });
        let want = format!("{v} {a}");
        if c.get(&key) != Some(&want) {
            bad.push(format!("{key}: C {:?}, Rust {want}", c.get(&key)));
        }
    }
    for (name, v) in mdr_sys::CONSTANTS {
        let key = format!("C {name}");
        if c.get(&key).map(|s| s.parse::<i128>().unwrap()) != Some(*v) {
            bad.push(format!("{key}: C {:?}, Rust {v}", c.get(&key)));
        }
    }
    for (name, v) in mdr_sys::TYPES {
        let key = format!("T {name}");
        if c.get(&key) != Some(&v.to_string()) {
            bad.push(format!("{key}: C {:?}, Rust {v}", c.get(&key)));
        }
    }
    assert!(bad.is_empty(), "layouts differ between C and bindings.rs:\n{}", bad.join("\n"));
    println!("abi: {} functions, {} layout entries, {} constants, {} types agree with C",
             nfn, mdr_sys::LAYOUTS.len(), mdr_sys::CONSTANTS.len(), mdr_sys::TYPES.len());
}

#[test]
fn bindings_are_what_generate_py_gives_now() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("generate.py");
    if !script.exists() {
        println!("skipped: {} is not on this machine", script.display());
        return;
    }
    match Command::new("python3").arg(&script).arg("--check").output() {
        Err(e) => println!("skipped: python3 not runnable ({e})"),
        Ok(out) => assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout),
                           String::from_utf8_lossy(&out.stderr)),
    }
}
