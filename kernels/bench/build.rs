//! Links OpenBLAS and pthreadpool when their shared libraries are installed (Debian's
//! `libopenblas-dev` and `libpthreadpool-dev`), and sets `have_openblas` / `have_pthreadpool`
//! so the benchmark can say "skipped" instead of failing to link where they are not. Debian's
//! XNNPACK is not linked: keepalloc-xnnpack opens it at run time (`peers::xnnpack`).

use std::path::Path;

const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib",
    "/usr/local/lib",
];

fn find(lib: &str) -> Option<&'static str> {
    LIB_DIRS
        .iter()
        .copied()
        .find(|dir| Path::new(dir).join(format!("lib{lib}.so")).exists())
}

fn main() {
    println!("cargo:rustc-check-cfg=cfg(have_openblas)");
    println!("cargo:rustc-check-cfg=cfg(have_pthreadpool)");
    println!("cargo:rerun-if-env-changed=KEEPALLOC_BENCH_NO_PEERS");
    let no_peers = std::env::var_os("KEEPALLOC_BENCH_NO_PEERS").is_some();
    for (lib, cfg) in [
        ("openblas", "have_openblas"),
        // Debian's libpthreadpool-dev: the T-thread pools of `--threads T`.
        ("pthreadpool", "have_pthreadpool"),
    ] {
        if no_peers {
            continue;
        }
        if let Some(dir) = find(lib) {
            println!("cargo:rerun-if-changed={dir}/lib{lib}.so");
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-lib=dylib={lib}");
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}
