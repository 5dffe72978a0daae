//! Compiles the hook trampoline (`src/catch_hook.cpp`): the one piece of the C library that
//! must be C++, because only C++ can catch a C++ exception escaping an init hook.
fn main() {
    println!("cargo:rerun-if-changed=src/catch_hook.cpp");
    cc::Build::new()
        .cpp(true)
        .file("src/catch_hook.cpp")
        .flag_if_supported("-std=c++17")
        .warnings(true)
        .compile("keepalloc_catch_hook");
}
