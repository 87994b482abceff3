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

/// Where a process's resident memory is now, by kind of mapping (KiB), from
/// `/proc/PID/smaps`: the binary's own pages, the heap and allocator arenas, the
/// pooling allocator's slots (guest linear memories, tables, stacks: the large
/// reservations), compiled provider code, and the rest.
pub fn rss_breakdown(pid: u32) -> Vec<(&'static str, u64)> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut kinds: Vec<(&'static str, u64)> = vec![
        ("the wasm-ccm binary (code and data)", 0),
        ("heap and allocator arenas", 0),
        (
            "guest memories, tables and stacks (pooling allocator slots)",
            0,
        ),
        ("compiled provider code (executable mappings)", 0),
        ("other (thread stacks, shared libraries)", 0),
    ];
    let mut current = 4;
    let mut last_header = String::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if first.contains('-') && first.chars().next().is_some_and(|c| c.is_ascii_hexdigit()) {
            let (start, end) = first.split_once('-').unwrap();
            let size = u64::from_str_radix(end, 16).unwrap_or(0)
                - u64::from_str_radix(start, 16).unwrap_or(0);
            let perms = fields.next().unwrap_or_default();
            let path = line.split_whitespace().nth(5).unwrap_or_default();
            current = if path.ends_with("/wasm-ccm") {
                0
            } else if path == "[heap]" {
                1
            } else if path.is_empty() && size >= 1 << 30 {
                2
            } else if perms.contains('x') && !path.starts_with('/') {
                3
            } else if path.is_empty()
                && u64::from_str_radix(start, 16).unwrap_or(1) % (64 << 20) == 0
            {
                // glibc's per-thread arenas: 64 MiB-aligned reservations.
                1
            } else {
                4
            };
        } else if first == "Rss:" {
            let kib = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            kinds[current].1 += kib;
            if std::env::var_os("RSS_DEBUG").is_some() && kib > 1024 {
                eprintln!("{kib} KiB in {}", last_header);
            }
        }
        if first.contains('-') && first.chars().next().is_some_and(|c| c.is_ascii_hexdigit()) {
            last_header = line.to_owned();
        }
    }
    kinds
}
