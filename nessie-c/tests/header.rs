//! The committed C header is exactly what cbindgen generates from the
//! source: a changed signature without a regenerated header fails here.
//! `NESSIE_BLESS=1 cargo test -p nessie-c --test header` rewrites it.

use std::path::Path;

#[test]
fn the_committed_header_is_what_cbindgen_generates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = dir.join("include/nessie.h");
    if std::env::var_os("NESSIE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("write include/nessie.h");
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/nessie.h differs from cbindgen's output; regenerate it with \
         NESSIE_BLESS=1 cargo test -p nessie-c --test header, and commit it\n\
         --- generated ---\n{}",
        String::from_utf8_lossy(&fresh)
    );
}
