// Embeds an rpath to the libtorch that torch-sys linked against, so the
// cdylib, tests, examples and benches load it without LD_LIBRARY_PATH.
// Also keeps libtorch_cuda as a real dependency: the linker's --as-needed
// would drop it (no symbol of it is referenced), and then libtorch never
// registers its CUDA hooks, so no CUDA device would ever be found.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else { return };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-env=ENKAI_LIBTORCH_LIB={lib}");
    let cuda = std::path::Path::new(&lib).join("libtorch_cuda.so");
    if cuda.exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,{},--as-needed", cuda.display());
    }
}
