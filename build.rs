// Embeds an rpath to the libtorch that torch-sys linked against, so the
// cdylib, tests, examples and benches load it without LD_LIBRARY_PATH.
// Also keeps libtorch_cuda as a real dependency: the linker's --as-needed
// would drop it (no symbol of it is referenced), and then libtorch never
// registers its CUDA hooks, so no CUDA device would ever be found.
// Finally compiles the small C++ shims (autocast/AdamW/GradScaler, and
// c10d process groups) against the same libtorch headers.
/// The C ABI's version, in one place: `enkai_abi_version()` returns it and the
/// SONAME carries its major (`libenkai_tensor.so.1`), so a program linked
/// against one major never loads another.
const ABI_VERSION: [u32; 3] = [1, 0, 0];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for (name, v) in ["MAJOR", "MINOR", "PATCH"].iter().zip(ABI_VERSION) {
        println!("cargo:rustc-env=ENKAI_ABI_{name}={v}");
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libenkai_tensor.so.{}", ABI_VERSION[0]);
    println!("cargo:rerun-if-changed=src/backend/torch/shim.cpp");
    println!("cargo:rerun-if-changed=src/backend/torch/dist_shim.cpp");
    println!("cargo:rerun-if-changed=src/backend/torch/op_shim.cpp");
    println!("cargo:rerun-if-changed=src/backend/torch/autograd_shim.cpp");
    println!("cargo:rerun-if-changed=src/backend/torch/shim_guard.h");
    println!("cargo:rerun-if-changed=src/backend/torch/gloo-decl");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else { return };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    let lib = std::path::Path::new(&lib);
    let cuda = lib.join("libtorch_cuda.so");
    if cuda.exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,{},--as-needed", cuda.display());
    }
    let include = lib.parent().expect("torch/lib has a parent").join("include");
    let nccl = nccl_includes(lib);
    let mut shim = torch_cxx(&include);
    if nccl.is_some() {
        shim.define("ENKAI_WITH_NCCL", None);
    }
    shim
        // c10d's Gloo process group, compiled against declaration-only gloo
        // headers (never a system gloo: libtorch carries its own).
        .define("USE_C10D_GLOO", None)
        .include("src/backend/torch/gloo-decl")
        .file("src/backend/torch/shim.cpp")
        .file("src/backend/torch/dist_shim.cpp")
        .file("src/backend/torch/op_shim.cpp")
        .file("src/backend/torch/autograd_shim.cpp")
        .compile("enkai_shim");
    // After the shim, which calls into it: static libraries link in order.
    if let Some(dirs) = nccl {
        let mut b = torch_cxx(&include);
        b.define("USE_C10D_NCCL", None);
        for d in &dirs {
            b.include(d);
        }
        b.file("src/backend/torch/dist_nccl.cpp").compile("enkai_nccl");
    }
}

/// A C++ build against the libtorch headers under `include`.
fn torch_cxx(include: &std::path::Path) -> cc::Build {
    let mut b = cc::Build::new();
    b.cpp(true)
        .pic(true)
        .std("c++20")
        .warnings(false)
        .include(include)
        .include(include.join("torch/csrc/api/include"))
        // PyPI torch >= 2.7 is built with the new libstdc++ ABI.
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-Wno-unused-parameter");
    b
}

/// The CUDA and NCCL include directories ProcessGroupNCCL.hpp needs, when the
/// venv has them (nvidia-nccl and nvidia-cuda-runtime come with torch;
/// scripts/setup.sh adds nvidia-cuda-crt and nvidia-cuda-cccl). Without them
/// the library is built with Gloo only. ENKAI_NO_NCCL=1 forces that.
fn nccl_includes(torch_lib: &std::path::Path) -> Option<Vec<std::path::PathBuf>> {
    println!("cargo:rerun-if-env-changed=ENKAI_NO_NCCL");
    println!("cargo:rerun-if-changed=src/backend/torch/dist_nccl.cpp");
    if std::env::var_os("ENKAI_NO_NCCL").is_some() {
        return None;
    }
    let nvidia = torch_lib.parent()?.parent()?.join("nvidia");
    let cuda = nvidia.join("cu13/include");
    let nccl = nvidia.join("nccl/include");
    let needed = [cuda.join("cuda_runtime.h"), cuda.join("crt/host_config.h"), cuda.join("nv/target"), nccl.join("nccl.h")];
    needed.iter().all(|p| p.exists()).then(|| vec![cuda, nccl])
}
