//! The committed C header must equal a fresh cbindgen run over the sources.
//! `ENKAI_UPDATE_HEADER=1` rewrites it instead (what `make header` does).

use std::path::Path;

#[test]
fn committed_header_is_fresh() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let mut fresh = Vec::new();
    cbindgen::generate(dir).expect("cbindgen runs").write(&mut fresh);
    let path = Path::new(dir).join("include/enkai_tensor.h");
    if std::env::var_os("ENKAI_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("write header");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/enkai_tensor.h is stale: run `make header` and commit the result"
    );
}
