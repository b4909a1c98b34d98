//! Gives this crate's tests, examples and benches an rpath to the libmdr
//! that mdr-sys found (DEP_MDR_LIB_DIR), so they run without
//! LD_LIBRARY_PATH, and tells the tests where the headers are.
fn main() {
    if let Ok(dir) = std::env::var("DEP_MDR_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        println!("cargo:rustc-env=MDR_LIB_DIR={dir}");
    }
    if let Ok(dir) = std::env::var("DEP_MDR_INCLUDE_DIR") {
        println!("cargo:rustc-env=MDR_INCLUDE_DIR={dir}");
    }
}
