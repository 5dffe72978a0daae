//! The C and C++ code blocks of README.md and docs/*.md, compiled (and run) by `cargo xtask
//! c-test`, so that a quick start cannot rot.
//!
//! Every fenced block whose info string starts with `c`, `cpp` or `c++` is written to a file of
//! its own and compiled against `capi/include` with warnings as errors (C11, C++17):
//! - a block whose info string also says `fragment` is a translation unit only (`-c`): it may
//!   call functions it only declares (a runtime's own, XNNPACK's, ONNX Runtime's);
//! - any other block must be a whole program: it is linked with the release
//!   `libkeepalloc_capi.a` (and `-lXNNPACK -lpthreadpool` when it includes `xnnpack.h`) and
//!   run, and must exit 0.
//!
//! A block that includes `xnnpack.h` where XNNPACK is not installed is skipped with a line
//! saying so, except under `CI` (then it is an error, as for the rest of c-test).
//!
//! CMake blocks are built by `cargo xtask install-test` against the installed package
//! ([`cmake_blocks`]).
//!
//! Rust blocks are doctests of the `keepalloc` crate, except those marked `ignore`: those
//! need a crate the facade cannot depend on (the `ort` crate), so each must be an excerpt of a
//! file that CI builds and runs. Its first line says which (`// From PATH, ...`), and every
//! other non-empty line, but `// ...`, must be a line of that file (leading and trailing
//! blanks aside), in the same order. An `ignore` block without that line fails.
//!
//! ARCHITECTURE.md is kept honest by this module's tests: every path it writes in backticks
//! and every relative link in it exists, and it stays under 300 lines.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util;

/// One fenced block: C or C++, or (`excerpt`) a Rust block marked `ignore`.
struct Snippet {
    /// `README.md:41`: the file and the line of the opening fence.
    origin: String,
    cpp: bool,
    fragment: bool,
    excerpt: bool,
    code: String,
}

/// The fenced C/C++ blocks of one Markdown text, in order.
fn extract(origin: &str, text: &str) -> Vec<Snippet> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let words: Vec<&str> = info
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
            .collect();
        let lang = words.first().copied().unwrap_or("");
        let mut code = String::new();
        for (_, body) in lines.by_ref() {
            if body.trim_start().starts_with("```") {
                break;
            }
            code.push_str(body);
            code.push('\n');
        }
        let excerpt = lang == "rust" && words.contains(&"ignore");
        let cpp = match lang {
            "c" => false,
            "cpp" | "c++" => true,
            _ if excerpt => false,
            _ => continue,
        };
        out.push(Snippet {
            origin: format!("{origin}:{}", n + 1),
            cpp,
            fragment: words.contains(&"fragment"),
            excerpt,
            code,
        });
    }
    out
}

/// Every fenced `cmake` block of README.md and docs/*.md: its origin (`README.md:48`) and
/// its text.
pub fn cmake_blocks() -> Result<Vec<(String, String)>, String> {
    let mut blocks = Vec::new();
    for (name, text) in markdown_texts(&util::root())? {
        let mut lines = text.lines().enumerate();
        while let Some((n, line)) = lines.next() {
            if line.trim() != "```cmake" {
                continue;
            }
            let code: Vec<&str> = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| !l.trim_start().starts_with("```"))
                .collect();
            blocks.push((format!("{name}:{}", n + 1), code.join("\n") + "\n"));
        }
    }
    Ok(blocks)
}

/// README.md and docs/*.md, each as its path from the root and its text.
fn markdown_texts(root: &Path) -> Result<Vec<(String, String)>, String> {
    markdown_files(root)?
        .into_iter()
        .map(|file| {
            let text =
                std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let name = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            Ok((name, text))
        })
        .collect()
}

/// README.md and docs/*.md, in a stable order.
fn markdown_files(root: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = vec![root.join("README.md")];
    let docs = root.join("docs");
    let mut more: Vec<PathBuf> = std::fs::read_dir(&docs)
        .map_err(|e| format!("{}: {e}", docs.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    files.extend(more);
    Ok(files)
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// Compiles every C/C++ block of README.md and docs/*.md against `include` and runs the whole
/// programs linked with `staticlib`; build products go under `out`.
pub fn run(staticlib: &Path, out: &Path) -> Result<(), String> {
    let root = util::root();
    let include = root.join("capi/include");
    let xnnpack = Path::new("/usr/include/xnnpack.h").is_file()
        || std::env::var_os("XNNPACK_INCLUDE_DIR")
            .is_some_and(|d| Path::new(&d).join("xnnpack.h").is_file());
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut snippets = Vec::new();
    for (name, text) in markdown_texts(&root)? {
        snippets.extend(extract(&name, &text));
    }
    if snippets.is_empty() {
        return Err("c-test: no C or C++ block found in README.md and docs/*.md".to_owned());
    }
    let (mut compiled, mut ran, mut skipped) = (0, 0, 0);
    for (i, s) in snippets.iter().enumerate() {
        if s.excerpt {
            check_excerpt(&root, s)?;
            println!(
                "  snippet {}: an excerpt of a file CI builds and runs",
                s.origin
            );
            continue;
        }
        let uses_xnnpack = s.code.contains("<xnnpack.h>");
        if uses_xnnpack && !xnnpack {
            if ci() {
                return Err(format!(
                    "{}: needs xnnpack.h, which is not installed, and CI is set",
                    s.origin
                ));
            }
            println!(
                "  snippet {}: skipped (libxnnpack-dev not installed)",
                s.origin
            );
            skipped += 1;
            continue;
        }
        let ext = if s.cpp { "cpp" } else { "c" };
        let src = out.join(format!("snippet{i}.{ext}"));
        std::fs::write(&src, &s.code).map_err(|e| format!("{}: {e}", src.display()))?;
        let compiler = if s.cpp {
            std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned())
        } else {
            std::env::var("CC").unwrap_or_else(|_| "cc".to_owned())
        };
        let mut cmd = Command::new(&compiler);
        cmd.arg(if s.cpp { "-std=c++17" } else { "-std=c11" })
            .args([
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wno-unused-function",
                "-Wno-unused-parameter",
                "-I",
            ])
            .arg(&include)
            .arg(&src);
        let bin = out.join(format!("snippet{i}"));
        if s.fragment {
            cmd.arg("-c").arg("-o").arg(bin.with_extension("o"));
        } else {
            cmd.arg("-o").arg(&bin).arg(staticlib);
            if uses_xnnpack {
                cmd.args(["-lXNNPACK", "-lpthreadpool"]);
            }
            cmd.args(["-lstdc++", "-lpthread", "-ldl", "-lm"]);
        }
        let output = cmd
            .output()
            .map_err(|e| format!("{}: running {compiler}: {e}", s.origin))?;
        if !output.status.success() {
            return Err(format!(
                "snippet {} (copied to {}) does not compile:\n{}",
                s.origin,
                src.display(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        compiled += 1;
        if s.fragment {
            println!("  snippet {}: compiles", s.origin);
            continue;
        }
        let run = Command::new(&bin)
            .output()
            .map_err(|e| format!("{}: running {}: {e}", s.origin, bin.display()))?;
        if !run.status.success() {
            return Err(format!(
                "snippet {} ran and failed ({}):\n{}{}",
                s.origin,
                run.status,
                String::from_utf8_lossy(&run.stdout),
                String::from_utf8_lossy(&run.stderr)
            ));
        }
        ran += 1;
        println!("  snippet {}: compiles, runs, exits 0", s.origin);
    }
    println!("c-test: doc snippets: {compiled} compiled, {ran} of them run, {skipped} skipped");
    Ok(())
}

/// An `ignore` Rust block: `// From PATH...` and then lines of PATH, in order.
fn check_excerpt(root: &Path, s: &Snippet) -> Result<(), String> {
    let mut lines = s.code.lines();
    let first = lines.next().unwrap_or("");
    let path = first
        .trim()
        .strip_prefix("// From ")
        .and_then(|rest| rest.split([',', ' ']).next())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            format!(
                "snippet {}: a Rust block marked `ignore` is compiled nowhere; its first line \
                 must be `// From PATH, ...` naming the file CI builds that holds it",
                s.origin
            )
        })?;
    let file = root.join(path);
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("snippet {}: {}: {e}", s.origin, file.display()))?;
    excerpt_mismatch(&text, lines).map_or(Ok(()), |line| {
        Err(format!(
            "snippet {}: the line `{line}` is not in {path} (after the lines before it)",
            s.origin
        ))
    })
}

/// The first line of `excerpt` not found in `text`, in order; `None` when all are.
fn excerpt_mismatch<'a>(text: &str, excerpt: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut file = text.lines().map(str::trim);
    for line in excerpt.map(str::trim) {
        if line.is_empty() || line == "// ..." {
            continue;
        }
        if !file.any(|l| l == line) {
            return Some(line);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{excerpt_mismatch, extract};
    use crate::util;

    /// ARCHITECTURE.md's limit: a map to read in one sitting, not a second manual.
    const ARCHITECTURE_MAX_LINES: usize = 300;

    /// The inline code spans of a Markdown text, outside fenced blocks, in order. A text whose
    /// backticks do not pair up is an error: one stray backtick would shift every span after it.
    fn code_spans(text: &str) -> Result<Vec<String>, String> {
        let mut prose = String::new();
        let mut fenced = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            } else if !fenced {
                prose.push_str(line);
                prose.push('\n');
            }
        }
        let pieces: Vec<&str> = prose.split('`').collect();
        if pieces.len().is_multiple_of(2) {
            return Err("an unpaired backtick outside the fenced blocks".to_owned());
        }
        Ok(pieces
            .iter()
            .skip(1)
            .step_by(2)
            .map(|s| (*s).to_owned())
            .collect())
    }

    /// A code span that names a repository path: no whitespace, and a `/` or a file name
    /// ending in `.rs`, `.md` or `.toml`.
    fn names_a_path(span: &str) -> bool {
        !span.is_empty()
            && !span.contains(char::is_whitespace)
            && (span.contains('/') || [".rs", ".md", ".toml"].iter().any(|e| span.ends_with(e)))
    }

    /// The file part of every relative link target (`[text](path#anchor)`) of a Markdown text.
    fn relative_links(text: &str) -> Vec<String> {
        text.split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
            .map(|target| target.split('#').next().unwrap_or("").to_owned())
            .filter(|file| {
                !file.is_empty() && !file.contains("://") && !file.starts_with("mailto:")
            })
            .collect()
    }

    #[test]
    fn architecture_names_only_paths_that_exist() {
        let root = util::root();
        let file = root.join("ARCHITECTURE.md");
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let lines = text.lines().count();
        assert!(
            lines < ARCHITECTURE_MAX_LINES,
            "ARCHITECTURE.md has {lines} lines; keep it under {ARCHITECTURE_MAX_LINES}"
        );
        let spans = code_spans(&text).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
        let paths: Vec<String> = spans.into_iter().filter(|s| names_a_path(s)).collect();
        let links = relative_links(&text);
        // A parser that found nothing would pass any file: the map names dozens of each.
        assert!(
            paths.len() >= 50,
            "only {} backticked paths found",
            paths.len()
        );
        assert!(
            links.len() >= 5,
            "only {} relative links found",
            links.len()
        );
        let mut missing: Vec<String> = paths
            .iter()
            .filter(|p| !root.join(p).exists())
            .map(|p| format!("`{p}`"))
            .collect();
        missing.extend(
            links
                .iter()
                .filter(|l| !root.join(l).exists())
                .map(|l| format!("link {l}")),
        );
        assert!(
            missing.is_empty(),
            "ARCHITECTURE.md names paths that do not exist from the workspace root: {}. A \
             backticked span with a `/`, or ending in .rs, .md or .toml, must be such a path: \
             fix it, or drop the backticks if it is not a path",
            missing.join(", ")
        );
    }

    #[test]
    fn architecture_check_reads_spans_and_links_as_written() {
        let text = "See `provider/src/cell.rs`, `KeepCell`, `cargo xtask fault-test` and\n\
                    `Cargo.toml`; [docs](docs/verification.md#the-commands), \
                    [web](https://example.org/a).\n```text\n`not/a/span`\n```\n`a\nb/c`\n";
        let spans = code_spans(text).unwrap();
        let paths: Vec<&String> = spans.iter().filter(|s| names_a_path(s)).collect();
        assert_eq!(paths, ["provider/src/cell.rs", "Cargo.toml"]);
        assert_eq!(relative_links(text), ["docs/verification.md"]);
        assert!(code_spans("one ` stray").is_err());
    }

    #[test]
    fn an_excerpt_must_keep_the_files_lines_in_order() {
        let file = "fn a() {\n    let x = 1;\n    let y = 2;\n}\n";
        assert_eq!(
            excerpt_mismatch(file, "let x = 1;\n// ...\nlet y = 2;".lines()),
            None
        );
        assert_eq!(
            excerpt_mismatch(file, "let y = 2;\nlet x = 1;".lines()),
            Some("let x = 1;")
        );
        assert_eq!(
            excerpt_mismatch(file, "let z = 3;".lines()),
            Some("let z = 3;")
        );
    }

    #[test]
    fn finds_c_and_cpp_blocks_with_their_marks() {
        let text = "x\n```c\nint main(void){return 0;}\n```\n```rust\nfn f(){}\n```\n\
                    ```cpp fragment\nint f();\n```\n```sh\nls\n```\n\
                    ```rust,ignore\n// From x.rs\n```\n";
        let s = extract("t.md", text);
        assert_eq!(s.len(), 3);
        assert!(s[2].excerpt && !s[0].excerpt);
        assert_eq!(s[0].origin, "t.md:2");
        assert!(!s[0].cpp && !s[0].fragment);
        assert!(s[1].cpp && s[1].fragment);
        assert_eq!(s[1].code, "int f();\n");
    }
}
