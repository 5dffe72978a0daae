//! `cargo xtask alloc-bench`: the allocator benchmarks (`table_overhead` and `contended`, the
//! examples of `keepalloc-allocators`) over several link layouts of the same code.
//!
//! On the Zen 4 machine these figures are for, an alloc + free of 64 bytes costs 4–5 ns, and
//! where the code sits moves that by more than the table's one indirect call costs:
//! byte-identical copies of the direct loop, at different addresses in one binary, read
//! 0.93× of each other, run after run; and four builds of an earlier `contended` that
//! differed only in the order of their code sections read mimalloc called directly at 4.1,
//! 4.8, 4.1 and 7.1 ns a pair at one thread, and the uncounted owner's table over it at
//! 1.13×, 1.10×, 1.12× and 0.60×. A ratio from
//! one binary is then the ratio of one layout. So this command links each example `N` times
//! with rust-lld's `--shuffle-sections=.text*=SEED` (the same object code, its functions in
//! another order: the loops, the table's entry points and mimalloc's and glibc's fast paths
//! all move), runs every binary, and reports each ratio's median over the layouts with the
//! lowest and highest layout, as Mytkowicz et al. ("Producing Wrong Data Without Doing
//! Anything Obviously Wrong!", ASPLOS 2009) and Stabilizer (Curtsinger and Berger, ASPLOS
//! 2013) recommend. Within a layout each ratio is the example's own: the median of paired
//! runs (see the examples' docs). Only code moves; data keeps the order the linker gives it.
//!
//! The layouts are built first, then run one after the other, so that no build runs beside
//! a measurement. No two binaries may be the same (a build that ignored the shuffle would
//! otherwise pass for a second layout).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::json;

use crate::util;

/// `cargo xtask alloc-bench` options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How many layouts, at least 2: seeds SEED to SEED + N - 1 (odd: the median is one
    /// layout's).
    #[arg(long, default_value_t = 5)]
    layouts: u64,
    /// The first layout's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Which example to run.
    #[arg(long, default_value = "both", value_parser = ["contended", "table_overhead", "both"])]
    example: String,
    /// Writes every layout's ratios and the summary as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One ratio of one example: (example, backend, threads or size, column).
type Key = (String, String, u64, String);

/// The `cell` lines of an example's `--machine` output: (key, the layout's ratio).
fn parse_cells(stdout: &str) -> Result<Vec<(Key, f64)>, String> {
    let mut cells = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with("cell\t")) {
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || format!("alloc-bench: a cell line that does not parse: {line:?}");
        if f.len() < 6 {
            return Err(bad());
        }
        let param: u64 = f[3].parse().map_err(|_| bad())?;
        let ratio: f64 = f[5].parse().map_err(|_| bad())?;
        if !(ratio.is_finite() && ratio > 0.0) {
            return Err(bad());
        }
        cells.push(((f[1].into(), f[2].into(), param, f[4].into()), ratio));
    }
    Ok(cells)
}

/// The median of `v` (the mean of the middle two for an even count), its lowest and highest.
fn summary(v: &[f64]) -> [f64; 3] {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    [median, s[0], s[n - 1]]
}

/// An error unless every binary differs from every other (a build that ignored the shuffle
/// would otherwise pass for a second layout).
fn distinct_layouts(binaries: &[(u64, Vec<u8>)]) -> Result<(), String> {
    for (i, (seed, bytes)) in binaries.iter().enumerate() {
        if let Some((other, _)) = binaries[..i].iter().find(|(_, b)| b == bytes) {
            return Err(format!(
                "alloc-bench: the layouts of seeds {other} and {seed} are the same binary: the \
                 shuffle did not apply"
            ));
        }
    }
    Ok(())
}

/// The seeds of `layouts` layouts from `first`: at least two (one layout would be a figure of
/// one layout again, and could not show that the shuffle applied), none past `u64::MAX`.
fn seeds(first: u64, layouts: u64) -> Result<Vec<u64>, String> {
    if layouts < 2 {
        return Err(format!(
            "alloc-bench: --layouts {layouts}: at least 2 (a median over layouts needs two, and \
             two binaries show that the shuffle applied)"
        ));
    }
    let last = first.checked_add(layouts - 1).ok_or_else(|| {
        format!("alloc-bench: --seed {first} with --layouts {layouts} runs past u64::MAX")
    })?;
    Ok((first..=last).collect())
}

/// The toolchain's `gcc-ld` directory, whose `ld.lld` runs rust-lld as the C compiler's
/// linker (`-B DIR -fuse-ld=lld`).
fn gcc_ld_dir() -> Result<PathBuf, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let output = |args: &[&str]| -> Result<String, String> {
        let out = Command::new(&rustc)
            .args(args)
            .output()
            .map_err(|e| format!("alloc-bench: could not run {rustc}: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let sysroot = output(&["--print", "sysroot"])?;
    let verbose = output(&["-vV"])?;
    let host = verbose
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .ok_or("alloc-bench: `rustc -vV` names no host")?;
    let dir = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(host)
        .join("bin/gcc-ld");
    if dir.join("ld.lld").is_file() {
        Ok(dir)
    } else {
        Err(format!(
            "alloc-bench: no rust-lld at {} (the toolchain's gcc-ld/ld.lld links the layouts)",
            dir.join("ld.lld").display()
        ))
    }
}

/// Builds `example` linked with its code sections shuffled by `seed`; returns a copy of the
/// binary under `target/alloc-layouts`.
fn build(example: &str, seed: u64, gcc_ld: &Path, out: &Path) -> Result<PathBuf, String> {
    let mut cmd = util::cargo();
    cmd.args([
        "rustc",
        "--quiet",
        "--release",
        "-p",
        "keepalloc-allocators",
        "--features",
        "mimalloc",
        "--example",
        example,
        "--",
        "-C",
    ])
    .arg(format!("link-arg=-B{}", gcc_ld.display()))
    .args(["-C", "link-arg=-fuse-ld=lld", "-C"])
    .arg(format!("link-arg=-Wl,--shuffle-sections=.text*={seed}"));
    util::run(&mut cmd)?;
    let built = util::root().join("target/release/examples").join(example);
    let copy = out.join(format!("{example}-{seed}"));
    std::fs::copy(&built, &copy)
        .map_err(|e| format!("alloc-bench: copying {}: {e}", built.display()))?;
    Ok(copy)
}

/// Builds every layout, then measures each.
pub fn run(options: Args) -> Result<(), String> {
    let seeds = seeds(options.seed, options.layouts)?;
    let examples: Vec<&str> = match options.example.as_str() {
        "both" => vec!["table_overhead", "contended"],
        one => vec![one],
    };
    let gcc_ld = gcc_ld_dir()?;
    let out = util::root().join("target/alloc-layouts");
    std::fs::create_dir_all(&out).map_err(|e| format!("alloc-bench: {}: {e}", out.display()))?;

    // Every layout first, so that no build runs beside a measurement.
    let mut binaries: Vec<(String, u64, PathBuf)> = Vec::new();
    for example in &examples {
        let mut bytes = Vec::new();
        for &seed in &seeds {
            let path = build(example, seed, &gcc_ld, &out)?;
            let content = std::fs::read(&path)
                .map_err(|e| format!("alloc-bench: {}: {e}", path.display()))?;
            bytes.push((seed, content));
            binaries.push((example.to_string(), seed, path));
        }
        distinct_layouts(&bytes)?;
        println!(
            "alloc-bench: {example}: {} layouts linked by rust-lld, no two the same binary",
            seeds.len()
        );
    }

    let mut by_key: BTreeMap<Key, Vec<(u64, f64)>> = BTreeMap::new();
    for (example, seed, path) in &binaries {
        let started = Instant::now();
        let output = Command::new(path)
            .arg("--machine")
            .output()
            .map_err(|e| format!("alloc-bench: could not run {}: {e}", path.display()))?;
        if !output.status.success() {
            return Err(format!(
                "alloc-bench: {} failed ({}): {}",
                path.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let cells = parse_cells(&stdout)?;
        if cells.is_empty() {
            return Err(format!("alloc-bench: {} printed no cells", path.display()));
        }
        println!(
            "alloc-bench: {example}, layout {seed} ({:.0} s):",
            started.elapsed().as_secs_f64()
        );
        for line in stdout.lines().filter(|l| !l.starts_with("cell\t")) {
            println!("  {line}");
        }
        for (key, ratio) in cells {
            by_key.entry(key).or_default().push((*seed, ratio));
        }
    }

    println!(
        "\nalloc-bench: each ratio's median over {} link layouts (seeds {}-{}) [lowest-highest \
         layout]",
        seeds.len(),
        seeds[0],
        seeds[seeds.len() - 1]
    );
    let mut rows = Vec::new();
    for ((example, backend, param, column), layouts) in &by_key {
        let ratios: Vec<f64> = layouts.iter().map(|(_, r)| *r).collect();
        let [median, lo, hi] = summary(&ratios);
        let unit = if example == "contended" {
            "threads"
        } else {
            "B"
        };
        println!(
            "  {example:14} {backend:8} {param:>8} {unit:7} {column:11} {median:.3}x \
             [{lo:.3}-{hi:.3}]"
        );
        rows.push(json!({
            "example": example,
            "backend": backend,
            if example == "contended" { "threads" } else { "size" }: param,
            "column": column,
            "median": median,
            "lowest": lo,
            "highest": hi,
            "layouts": layouts.iter().map(|(s, r)| json!({"seed": s, "ratio": r})).collect::<Vec<_>>(),
        }));
    }
    if let Some(path) = &options.json {
        let doc = json!({
            "layouts": seeds,
            "shuffle": ".text*",
            "ratios": rows,
        });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text)
            .map_err(|e| format!("alloc-bench: writing {}: {e}", path.display()))?;
        println!("alloc-bench: wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_parse_and_bad_lines_are_errors() {
        let out = "backend ...\ncell\tcontended\tmimalloc\t2\tuncounted\t1.0500\t0.98\t1.1\n\
                   cell\ttable_overhead\tsystem\t64\ttable64\t0.9700\nworst 1.05x\n";
        let cells = parse_cells(out).unwrap();
        assert_eq!(cells.len(), 2);
        assert_eq!(
            cells[0].0,
            ("contended".into(), "mimalloc".into(), 2, "uncounted".into())
        );
        assert_eq!(cells[1].1, 0.97);
        assert!(parse_cells("cell\tcontended\tmimalloc\ttwo\tuncounted\t1.0\n").is_err());
        assert!(parse_cells("cell\tcontended\tmimalloc\t2\tuncounted\tNaN\n").is_err());
        assert!(parse_cells("cell\tcontended\n").is_err());
    }

    #[test]
    fn the_summary_is_the_median_over_layouts_with_the_extremes() {
        assert_eq!(summary(&[1.2, 0.6, 1.1]), [1.1, 0.6, 1.2]);
        let [m, lo, hi] = summary(&[1.13, 1.10, 1.12, 0.60]);
        assert!((m - 1.11).abs() < 1e-12);
        assert_eq!((lo, hi), (0.60, 1.13));
    }

    #[test]
    fn the_seeds_are_at_least_two_and_do_not_overflow() {
        assert_eq!(seeds(1, 5).unwrap(), vec![1, 2, 3, 4, 5]);
        assert_eq!(
            seeds(u64::MAX - 1, 2).unwrap(),
            vec![u64::MAX - 1, u64::MAX]
        );
        assert!(seeds(1, 1).unwrap_err().contains("at least 2"));
        assert!(seeds(1, 0).unwrap_err().contains("at least 2"));
        assert!(seeds(u64::MAX, 2).unwrap_err().contains("past u64::MAX"));
    }

    #[test]
    fn two_layouts_that_are_the_same_binary_are_refused() {
        assert!(distinct_layouts(&[(1, b"a".to_vec()), (2, b"b".to_vec())]).is_ok());
        let same = distinct_layouts(&[(1, b"a".to_vec()), (2, b"b".to_vec()), (3, b"a".to_vec())])
            .unwrap_err();
        assert!(same.contains("seeds 1 and 3"), "{same}");
    }
}
