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

/// A process's resident memory and CPU time, read from `/proc/<pid>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessUsage {
    /// Resident set now (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Peak resident set (`VmHWM`), KiB.
    pub peak_rss_kib: u64,
    /// User and system CPU time so far, seconds.
    pub cpu_secs: f64,
}

/// `pid`'s [`ProcessUsage`]; `None` once it is gone.
pub fn process_usage(pid: u32) -> Option<ProcessUsage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |field: &str| {
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis: state is the first, utime and
    // stime the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ProcessUsage {
        rss_kib: kib("VmRSS:"),
        peak_rss_kib: kib("VmHWM:"),
        cpu_secs: ticks as f64 / per_second,
    })
}
