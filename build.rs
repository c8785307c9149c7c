// Embeds an rpath to the libtorch that torch-sys linked against, so the
// cdylib, tests, examples and benches load it without LD_LIBRARY_PATH.
// Also keeps libtorch_cuda as a real dependency: the linker's --as-needed
// would drop it (no symbol of it is referenced), and then libtorch never
// registers its CUDA hooks, so no CUDA device would ever be found.
// Finally compiles the small C++ shims (autocast/AdamW/GradScaler, and
// c10d process groups) against the same libtorch headers.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/backend/torch/shim.cpp");
    println!("cargo:rerun-if-changed=src/backend/torch/dist_shim.cpp");
    println!("cargo:rerun-if-changed=src/backend/torch/gloo-decl");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else { return };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    let lib = std::path::Path::new(&lib);
    let cuda = lib.join("libtorch_cuda.so");
    if cuda.exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,{},--as-needed", cuda.display());
    }
    let include = lib.parent().expect("torch/lib has a parent").join("include");
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .std("c++20")
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        // PyPI torch >= 2.7 is built with the new libstdc++ ABI.
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-Wno-unused-parameter")
        // c10d's Gloo process group, compiled against declaration-only gloo
        // headers (never a system gloo: libtorch carries its own).
        .define("USE_C10D_GLOO", None)
        .include("src/backend/torch/gloo-decl")
        .file("src/backend/torch/shim.cpp")
        .file("src/backend/torch/dist_shim.cpp")
        .compile("enkai_shim");
}
