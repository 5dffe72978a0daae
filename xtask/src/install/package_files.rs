//! The files that tell build systems where keepalloc is: `keepalloc.pc` for pkg-config and
//! the CMake config package (`keepallocConfig.cmake`, `keepallocConfigVersion.cmake`).
//!
//! Both name the installed prefix, never the staging directory. The CMake package is
//! relocatable when the libdir lies under the prefix: it finds the prefix from its own
//! directory (`CMAKE_CURRENT_LIST_DIR`), as CMake's `configure_package_config_file` does.

use std::path::{Path, PathBuf};

use super::{Layout, Names};

/// Every package file: its installed path and its text.
pub fn all(
    layout: &Layout,
    names: &Names,
    native_static_libs: &[String],
) -> Vec<(PathBuf, String)> {
    let cmake_dir = layout.libdir.join("cmake/keepalloc");
    vec![
        (
            layout.libdir.join("pkgconfig/keepalloc.pc"),
            pkg_config(layout, names, native_static_libs),
        ),
        (
            cmake_dir.join("keepallocConfig.cmake"),
            cmake_config(layout, names, native_static_libs),
        ),
        (
            cmake_dir.join("keepallocConfigVersion.cmake"),
            cmake_version(names),
        ),
    ]
}

/// `path` as `${var}/relative` when it lies under `base`, else as it is.
fn under(path: &Path, base: &Path, var: &str) -> String {
    match path.strip_prefix(base) {
        Ok(rel) if rel.as_os_str().is_empty() => var.to_owned(),
        Ok(rel) => format!("{var}/{}", rel.display()),
        Err(_) => path.display().to_string(),
    }
}

fn pkg_config(layout: &Layout, names: &Names, native_static_libs: &[String]) -> String {
    let private: Vec<String> = native_static_libs
        .iter()
        .map(|l| format!("-l{l}"))
        .collect();
    format!(
        "prefix={prefix}\n\
         libdir={libdir}\n\
         includedir={includedir}\n\
         \n\
         Name: keepalloc\n\
         Description: One process-wide allocator owner for several C libraries (XNNPACK's \
         xnn_allocator layout), built once and never freed\n\
         Version: {version}\n\
         Libs: -L${{libdir}} -lkeepalloc\n\
         Libs.private: {private}\n\
         Cflags: -I${{includedir}}\n",
        prefix = layout.prefix.display(),
        libdir = under(&layout.libdir, &layout.prefix, "${prefix}"),
        includedir = under(&layout.includedir, &layout.prefix, "${prefix}"),
        version = names.version,
        private = private.join(" "),
    )
}

/// How the config file finds the prefix: from its own directory when the libdir is under
/// the prefix (relocatable), else the absolute prefix.
fn cmake_prefix(layout: &Layout) -> String {
    match layout.libdir.strip_prefix(&layout.prefix) {
        Ok(rel) => {
            // LIBDIR/cmake/keepalloc: the libdir's own depth plus two.
            let up = "/..".repeat(rel.components().count() + 2);
            format!(
                "get_filename_component(_keepalloc_prefix \"${{CMAKE_CURRENT_LIST_DIR}}{up}\" \
                 ABSOLUTE)"
            )
        }
        Err(_) => format!("set(_keepalloc_prefix \"{}\")", layout.prefix.display()),
    }
}

fn cmake_config(layout: &Layout, names: &Names, native_static_libs: &[String]) -> String {
    let libdir = under(&layout.libdir, &layout.prefix, "${_keepalloc_prefix}");
    let includedir = under(&layout.includedir, &layout.prefix, "${_keepalloc_prefix}");
    format!(
        r#"# keepalloc {version}'s CMake package, written by `cargo xtask install`.
#
#   find_package(keepalloc {major_minor} CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE keepalloc::keepalloc)         # libkeepalloc.so
#   target_link_libraries(app PRIVATE keepalloc::keepalloc_static)  # libkeepalloc.a
#
# keepalloc_PRELOAD_LIBRARY is libkeepalloc_preload.so (LD_PRELOAD it to adopt the XNNPACK
# inside a runtime you cannot rebuild; docs/embedding.md).
if(CMAKE_VERSION VERSION_LESS 3.11)
  message(FATAL_ERROR "keepalloc's CMake package needs CMake 3.11 or later")
endif()

{prefix}
set(_keepalloc_libdir "{libdir}")
set(_keepalloc_includedir "{includedir}")

foreach(_keepalloc_file "${{_keepalloc_libdir}}/{file}" "${{_keepalloc_libdir}}/libkeepalloc.a"
                        "${{_keepalloc_includedir}}/keepalloc.h")
  if(NOT EXISTS "${{_keepalloc_file}}")
    set(keepalloc_FOUND FALSE)
    set(keepalloc_NOT_FOUND_MESSAGE
        "keepalloc's CMake package is in ${{CMAKE_CURRENT_LIST_DIR}} but ${{_keepalloc_file}} is missing")
    return()
  endif()
endforeach()

{shared}{static_}set(keepalloc_PRELOAD_LIBRARY "${{_keepalloc_libdir}}/libkeepalloc_preload.so")

unset(_keepalloc_file)
unset(_keepalloc_prefix)
unset(_keepalloc_libdir)
unset(_keepalloc_includedir)
"#,
        version = names.version,
        major_minor = names.version.rsplit_once('.').map_or("", |(mm, _)| mm),
        prefix = cmake_prefix(layout),
        file = names.file,
        shared = cmake_imported_target(
            "keepalloc",
            "SHARED",
            &[
                (
                    "IMPORTED_LOCATION",
                    &format!("${{_keepalloc_libdir}}/{}", names.file)
                ),
                ("IMPORTED_SONAME", &names.soname),
                ("INTERFACE_INCLUDE_DIRECTORIES", "${_keepalloc_includedir}"),
            ],
        ),
        static_ = cmake_imported_target(
            "keepalloc_static",
            "STATIC",
            &[
                ("IMPORTED_LOCATION", "${_keepalloc_libdir}/libkeepalloc.a"),
                ("IMPORTED_LINK_INTERFACE_LANGUAGES", "C"),
                ("INTERFACE_INCLUDE_DIRECTORIES", "${_keepalloc_includedir}"),
                ("INTERFACE_LINK_LIBRARIES", &native_static_libs.join(";")),
            ],
        ),
    )
}

/// The imported target `keepalloc::<name>` (`kind`: SHARED or STATIC) with `properties`,
/// unless the project already has one by that name.
fn cmake_imported_target(name: &str, kind: &str, properties: &[(&str, &str)]) -> String {
    let mut block = format!(
        "if(NOT TARGET keepalloc::{name})\n  add_library(keepalloc::{name} {kind} IMPORTED)\n  \
         set_target_properties(keepalloc::{name} PROPERTIES"
    );
    for (key, value) in properties {
        block.push_str(&format!("\n    {key} \"{value}\""));
    }
    block.push_str(")\nendif()\n");
    block
}

/// Compatible versions: before 1.0 the same major.minor (a 0.x minor may break the ABI, as
/// the soname says), from 1.0 the same major; never older than the one asked for.
fn cmake_version(names: &Names) -> String {
    let mut parts = names.version.split('.');
    let (major, minor) = (parts.next().unwrap_or("0"), parts.next().unwrap_or("0"));
    let same = if major == "0" {
        format!(
            "PACKAGE_FIND_VERSION_MAJOR STREQUAL \"0\" AND PACKAGE_FIND_VERSION_MINOR STREQUAL \"{minor}\""
        )
    } else {
        format!("PACKAGE_FIND_VERSION_MAJOR STREQUAL \"{major}\"")
    };
    format!(
        r#"# keepalloc {version}: which requested versions this package satisfies.
set(PACKAGE_VERSION "{version}")
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif({same})
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
# A 64-bit library: a 32-bit project cannot use it.
if(CMAKE_SIZEOF_VOID_P AND NOT CMAKE_SIZEOF_VOID_P STREQUAL "8")
  set(PACKAGE_VERSION "${{PACKAGE_VERSION}} (64-bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
endif()
"#,
        version = names.version,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(prefix: &str, libdir: &str) -> Layout {
        Layout::new(
            Path::new(prefix),
            Path::new(libdir),
            Some(Path::new("/stage")),
        )
        .unwrap()
    }

    #[test]
    fn pkg_config_names_the_prefix_and_a_multiarch_libdir() {
        let names = Names::for_version("0.1.0").unwrap();
        let pc = pkg_config(
            &layout("/usr", "lib/x86_64-linux-gnu"),
            &names,
            &["m".into()],
        );
        assert!(
            pc.starts_with("prefix=/usr\nlibdir=${prefix}/lib/x86_64-linux-gnu\n"),
            "{pc}"
        );
        assert!(
            pc.contains("Libs.private: -lm\n") && !pc.contains("stage"),
            "{pc}"
        );
    }

    #[test]
    fn the_cmake_package_finds_its_prefix_from_its_own_directory() {
        let l = layout("/usr", "lib/x86_64-linux-gnu");
        assert!(cmake_prefix(&l).contains("${CMAKE_CURRENT_LIST_DIR}/../../../.."));
        let l = layout("/opt/k", "/lib64");
        assert_eq!(cmake_prefix(&l), "set(_keepalloc_prefix \"/opt/k\")");
        let text = cmake_config(&l, &Names::for_version("0.1.0").unwrap(), &[]);
        assert!(text.contains("set(_keepalloc_libdir \"/lib64\")"), "{text}");
    }
}
