//! The declaration-only gloo headers (src/backend/torch/gloo-decl/) are only
//! sound while ProcessGroupGloo and its Options have the size libtorch gives
//! them: we allocate them, libtorch's code lays them out. This fails when a
//! torch upgrade moves either, before anything corrupts memory.
#![cfg(feature = "torch")]

/// The usable size glibc's malloc reports for a request of `n` bytes (16-byte chunks, 8 of header).
fn usable(n: usize) -> usize {
    ((n + 8 + 15) & !15) - 8
}

#[test]
fn our_gloo_types_have_libtorchs_sizes() {
    let [(pg, lib_pg), (opts, lib_opts)] = enkai_tensor::dist::gloo_layout().expect("layout probe runs");
    assert_eq!(usable(pg), lib_pg, "sizeof(ProcessGroupGloo) = {pg} here, libtorch allocates {lib_pg} usable bytes");
    assert_eq!(usable(opts), lib_opts, "sizeof(ProcessGroupGloo::Options) = {opts} here, libtorch allocates {lib_opts}");
}
