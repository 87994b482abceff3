//! What every benchmark prints first.

/// The date and commit of a run, for tables meant to be compared (`2026-11-25,
/// commit 1a2b3c4`).
pub fn bench_stamp() -> String {
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".into())
    };
    format!(
        "{}, commit {}",
        run("date", &["-u", "+%F %H:%M UTC"]),
        run("git", &["rev-parse", "--short", "HEAD"])
    )
}

/// Prints a bench's first line: its name, the core count, the date and the commit.
pub fn print_bench_heading(bench: &str) {
    println!(
        "{bench}: {} cores, {}\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        bench_stamp()
    );
}

/// The `wasm-ccm` a bench runs: `WASM_CCM_BIN`, a relative path taken from the
/// workspace root (where the documented commands run; cargo runs a bench in its
/// package's directory), else this build's.
pub fn bench_wasm_ccm_bin() -> std::path::PathBuf {
    match std::env::var_os("WASM_CCM_BIN").map(std::path::PathBuf::from) {
        Some(bin) if bin.is_relative() => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(bin),
        Some(bin) => bin,
        None => crate::wasm_ccm_bin(),
    }
}
