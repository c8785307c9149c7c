// Embeds an rpath to the libtorch that torch-sys linked against, so the
// cdylib, tests, examples and benches load it without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo:rustc-env=ENKAI_LIBTORCH_LIB={lib}");
    }
}
