//! `cargo xtask bench`: keepalloc-kernels against its peers (work in progress).

fn main() {}
