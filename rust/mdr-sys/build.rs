//! Finds libmdr, in this order:
//!   1. `MDR_DIR`: an install prefix (`$MDR_DIR/lib*/libmdr.so`, headers in
//!      `$MDR_DIR/include`) or a CMake build folder (`$MDR_DIR/libmdr.so`);
//!   2. `pkg-config --libs-only-L --cflags-only-I mdr`, run as a command;
//!   3. the repository's own build folder, `../../build` from this crate.
//! Links it dynamically and tells dependents (`DEP_MDR_LIB_DIR`,
//! `DEP_MDR_INCLUDE_DIR`) where it is, so that their tests and examples get
//! an rpath and run without LD_LIBRARY_PATH.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn lib_in(dir: &Path) -> bool {
    ["libmdr.so", "libmdr.dylib", "libmdr.a", "mdr.lib"].iter().any(|f| dir.join(f).exists())
}

fn main() {
    println!("cargo:rerun-if-env-changed=MDR_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let repo = manifest.join("..").join("..");
    let mut looked = Vec::new();
    let mut found: Option<(PathBuf, PathBuf)> = None; // (lib dir, include dir)

    if let Ok(dir) = env::var("MDR_DIR") {
        let dir = PathBuf::from(dir);
        for sub in ["lib", "lib64", "."] {
            let l = dir.join(sub);
            looked.push(format!("MDR_DIR: {}/libmdr.so", l.display()));
            if found.is_none() && lib_in(&l) {
                let inc = if dir.join("include/mdr/mdr.h").exists() { dir.join("include") } else { repo.join("include") };
                found = Some((l, inc));
            }
        }
        if found.is_none() {
            panic!("mdr-sys: MDR_DIR={} holds no libmdr (looked for {}). Point MDR_DIR at an install prefix or a CMake build folder of libmdr.",
                   dir.display(), looked.join(", "));
        }
    } else {
        looked.push("MDR_DIR (unset)".into());
    }

    if found.is_none() {
        match Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
            .args(["--libs-only-L", "--cflags-only-I", "mdr"])
            .output()
        {
            Ok(out) if out.status.success() => {
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let lib = text.split_whitespace().find_map(|w| w.strip_prefix("-L")).map(PathBuf::from);
                let inc = text.split_whitespace().find_map(|w| w.strip_prefix("-I")).map(PathBuf::from);
                looked.push(format!("pkg-config mdr: {}", text.trim()));
                if let Some(l) = lib {
                    if lib_in(&l) {
                        found = Some((l, inc.unwrap_or_else(|| repo.join("include"))));
                    }
                }
            }
            Ok(_) => looked.push("pkg-config mdr (no such package)".into()),
            Err(e) => looked.push(format!("pkg-config ({e})")),
        }
    }

    if found.is_none() {
        let b = repo.join("build");
        looked.push(format!("the repository's build folder {}/libmdr.so", b.display()));
        if lib_in(&b) {
            found = Some((b, repo.join("include")));
        }
    }

    let (lib, inc) = found.unwrap_or_else(|| {
        panic!(
            "mdr-sys: libmdr not found. Looked for: {}.\nBuild it (cmake -S . -B build && cmake --build build --target mdr) or set MDR_DIR.",
            looked.join("; ")
        )
    });
    let lib = lib.canonicalize().unwrap_or(lib);
    let inc = inc.canonicalize().unwrap_or(inc);
    // Only files that exist: a missing one would make cargo rerun this every build.
    for f in ["libmdr.so", "libmdr.a"] {
        if lib.join(f).exists() {
            println!("cargo:rerun-if-changed={}", lib.join(f).display());
        }
    }
    println!("cargo:rustc-link-search=native={}", lib.display());
    if lib.join("libmdr.so").exists() || lib.join("libmdr.dylib").exists() {
        println!("cargo:rustc-link-lib=dylib=mdr");
    } else {
        // A static libmdr needs what its mdr.pc lists in Libs.private.
        println!("cargo:rustc-link-lib=static=mdr");
        println!("cargo:rustc-link-lib=dylib=stdc++");
        println!("cargo:rustc-link-lib=dylib=pthread");
    }
    // This crate's own tests: rpath, and where the headers are (tests/abi.rs).
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-env=MDR_LIB_DIR={}", lib.display());
    println!("cargo:rustc-env=MDR_INCLUDE_DIR={}", inc.display());
    // Dependents: DEP_MDR_LIB_DIR and DEP_MDR_INCLUDE_DIR.
    println!("cargo:lib_dir={}", lib.display());
    println!("cargo:include_dir={}", inc.display());
}
