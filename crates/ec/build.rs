//! Links Intel ISA-L when the `isal` feature is on and the library can be found.
//!
//! Sets `cfg(kioku_isal)` on success. When the library is missing the crate still builds
//! and uses its portable engines; a cargo warning says how to get the fast one.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kioku_isal)");
    println!("cargo:rerun-if-env-changed=KIOKU_EC_NO_ISAL");
    if std::env::var_os("CARGO_FEATURE_ISAL").is_none()
        || std::env::var_os("KIOKU_EC_NO_ISAL").is_some()
    {
        return;
    }
    match pkg_config::Config::new()
        .atleast_version("2.20")
        .probe("libisal")
    {
        Ok(_) => println!("cargo:rustc-cfg=kioku_isal"),
        Err(e) => println!(
            "cargo:warning=ISA-L not found ({e}); kioku-ec uses its portable engine. \
             Install libisal-dev (scripts/deps.sh) for the fastest engine."
        ),
    }
}
