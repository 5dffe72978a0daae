//! One mutant as cargo-mutants reports it, its verdict, and applying it to a file exactly
//! as cargo-mutants did.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

/// Where a mutant was in the source, as cargo-mutants reports it (1-based, end exclusive,
/// columns counted in chars).
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub(super) start: (usize, usize),
    pub(super) end: (usize, usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Verdict {
    Caught,
    Missed,
    Timeout,
    Unviable,
}

#[derive(Debug)]
pub(super) struct Mutant {
    /// `file:line:col: description`.
    pub(super) name: String,
    pub(super) file: String,
    pub(super) span: Span,
    pub(super) replacement: String,
    /// cargo-mutants' diff of this mutant, when it wrote one.
    pub(super) diff: Option<PathBuf>,
    pub(super) verdict: Verdict,
    /// Which command caught it (stage 1's tests, loom, the campaign).
    pub(super) caught_by: Option<&'static str>,
    /// Whether stage 2 runs it if it survives stage 1 (its part's
    /// [`Part::stage2`](super::parts::Part::stage2)).
    pub(super) stage2: bool,
}

impl Mutant {
    /// The name without line and column: stable while code above it moves.
    pub(super) fn key(&self) -> String {
        strip_line_col(&self.name)
    }
}

pub(super) fn strip_line_col(name: &str) -> String {
    // `path:line:col: description`.
    let mut parts = name.splitn(4, ':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(file), Some(line), Some(col), Some(rest))
            if line.parse::<usize>().is_ok() && col.parse::<usize>().is_ok() =>
        {
            format!("{file}:{rest}")
        }
        _ => name.to_owned(),
    }
}

/// The marker cargo-mutants puts after every replacement (kept so that the mutated file is
/// byte for byte the one cargo-mutants built).
const MARKER: &str = "/* ~ changed by cargo-mutants ~ */";

/// `code` with `span` replaced, as cargo-mutants' `Span::replace` does it.
pub(super) fn mutate(code: &str, span: Span, replacement: &str) -> String {
    let replacement = format!("{replacement} {MARKER}");
    let mut out = String::with_capacity(code.len() + replacement.len());
    let (mut line, mut col) = (1, 1);
    for c in code.chars() {
        if (line, col) == span.start {
            out.push_str(&replacement);
        }
        if (line, col) < span.start || (line, col) >= span.end {
            out.push(c);
        }
        if c == '\n' {
            line += 1;
            col = 1;
        } else if c != '\r' {
            col += 1;
        }
    }
    if (line, col) == span.start {
        out.push_str(&replacement);
    }
    out
}

/// Guards against applying a mutant to a file that is not the one cargo-mutants mutated:
/// every line cargo-mutants' diff adds must be in our mutated text.
pub(super) fn check_against_diff(m: &Mutant, mutated: &str) -> Result<(), String> {
    let Some(diff) = &m.diff else {
        return Ok(());
    };
    let text = fs::read_to_string(diff).map_err(|e| format!("read {}: {e}", diff.display()))?;
    let lines: BTreeSet<&str> = mutated.lines().collect();
    for added in text
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
    {
        if !lines.contains(&added[1..]) {
            return Err(format!(
                "could not reproduce {} (its diff adds `{}`)",
                m.name,
                &added[1..]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutate_replaces_the_span_like_cargo_mutants() {
        let code = "fn f() -> u8 {\n    1 + 2\n}\n";
        let span = Span {
            start: (2, 5),
            end: (2, 10),
        };
        assert_eq!(
            mutate(code, span, "0"),
            format!("fn f() -> u8 {{\n    0 {MARKER}\n}}\n")
        );
        // A multi-line span, and a deletion (empty replacement).
        let span = Span {
            start: (1, 14),
            end: (3, 2),
        };
        assert_eq!(mutate(code, span, ""), format!("fn f() -> u8  {MARKER}\n"));
        // Columns count chars, not bytes.
        let code = "// ─ é\nlet x = a == b;\n";
        let span = Span {
            start: (2, 11),
            end: (2, 13),
        };
        assert_eq!(
            mutate(code, span, "!="),
            format!("// ─ é\nlet x = a != {MARKER} b;\n")
        );
    }

    #[test]
    fn names_are_matched_without_line_and_column() {
        assert_eq!(
            strip_line_col("provider/src/cell.rs:107:9: replace f -> bool with true"),
            "provider/src/cell.rs: replace f -> bool with true"
        );
        assert_eq!(strip_line_col("no location"), "no location");
    }
}
