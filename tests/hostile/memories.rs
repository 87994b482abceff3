//! A component with several linear memories, built from `guests/fixtures/multi-memory`:
//! four core module instances with one memory each (the most memories the pooling
//! allocator gives a component, and the one a core module may define), each grown in
//! `initialize` by the MiB its cloud config names (`grow-mib=N`), every page written.
//! `memoryMiB` counts all of an instance's memories together: growing each is refused
//! once their sum reaches the budget (the fixture traps), the host never holds more than
//! the budget, and the version serving before keeps serving.

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use wasm_ccm::hot_swap::{self, Outcome, ReloadError, ReloadReporter, Reloader};
use wasm_ccm_host::provider::{LoadError, ProviderSource, SharedProvider};
use wasm_ccm_tests::{guest, wasm_ccm_bin};

use super::*;

/// The fixture's component, as `scripts/build-guests.sh` leaves it.
const FIXTURE: &str = "fixture_multi_memory";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_growing_four_memories_past_memory_mib_is_refused_and_the_previous_serves() {
    let cloud = SimCloud::start("127.0.0.1:0", TOKEN).await.unwrap();
    cloud.with_state(|s| s.create_instance(NewInstance::named("good-node")));
    let loader = loader();
    // The reference provider serves under its policy (memoryMiB: 64, the default). The
    // cloud config also asks the fixture for 60 MiB in each memory: the reference
    // provider takes the zone as any text.
    let dir = ProviderDir::new("reference_provider", "simcloud", &policy_for(&cloud), TOKEN);
    let config = String::from_utf8(cloud_config(&cloud))
        .unwrap()
        .replace("zone-home", "grow-mib=60");
    let config_file = dir.dir.path().join("cloud-config.json");
    std::fs::write(&config_file, &config).unwrap();
    let serving = loader
        .load(&dir.wasm, config.into_bytes())
        .await
        .expect("load the reference provider");
    let v1 = serving.sha256().to_owned();
    let shared = SharedProvider::from(serving);
    let fingerprint = ProviderSource::read(&dir.wasm, Some(&config_file))
        .unwrap()
        .fingerprint;
    let metrics = Metrics::new();
    let mut reloader = Reloader::new(
        hot_swap::Settings {
            component: dir.wasm.clone(),
            cloud_config: Some(config_file),
            provider_name: "simcloud".into(),
            // No controller runs: nothing but the budget stands between the new version
            // (which exports only identity) and serving.
            controllers: Vec::new(),
            rescan_period: Duration::from_secs(30),
            debounce: hot_swap::DEBOUNCE,
            allow_untagged_cloud: false,
            canary: None,
        },
        loader.clone(),
        shared.clone(),
        fingerprint,
        Arc::new(ReloadReporter::new(&metrics, None)),
    );

    // The new version: four memories of 60 MiB, each under memoryMiB, 240 MiB in all.
    std::fs::copy(guest(FIXTURE), &dir.wasm).unwrap();
    let outcome = keeps_serving(&shared.current(), reloader.check()).await;
    match outcome {
        Outcome::Refused(ReloadError::Load(LoadError::Initialize {
            source:
                ProviderError::Trap {
                    function: "initialize",
                    kind: TrapKind::Unreachable,
                    ..
                },
            ..
        })) => {}
        other => panic!("the version over its budget was not refused at initialize: {other:?}"),
    }
    let current = shared.current();
    assert_eq!(current.sha256(), v1, "the previous version serves");
    let v2 = current
        .instances_v2()
        .expect("the reference provider exports instances-v2");
    assert!(
        v2.instance_exists(&node("good-node", None, &[]))
            .await
            .unwrap()
    );
}

/// The host process's peak resident memory, each run a process of its own: a guest
/// asking 60 MiB of each of its four memories gets them all under `memoryMiB: 256`
/// (the host holds them: 240 MiB more than a run growing nothing), and under
/// `memoryMiB: 64` traps at the second, the host holding one memory's worth, not four
/// (240 MiB, which `memoryMiB` counted per memory allowed). Start-up alone varies a
/// run's peak by tens of MiB, so the bounds leave that much room.
#[test]
fn the_host_holds_at_most_memory_mib_of_a_guest_growing_four_memories() {
    const BUDGET_MIB: u64 = 64;
    let policy = |mib: u64| format!("limits: {{memoryMiB: {mib}, poolSize: 1}}\n");
    let small = ProviderDir::new(FIXTURE, "multi", &policy(BUDGET_MIB), TOKEN);
    let large = ProviderDir::new(FIXTURE, "multi", &policy(256), TOKEN);

    let (code, stderr, idle) = call_fixture(&small, 0);
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr, allowed) = call_fixture(&large, 60);
    assert_eq!(
        code, 0,
        "4 x 60 MiB under memoryMiB 256 was refused: {stderr}"
    );
    let (code, stderr, over) = call_fixture(&small, 60);
    println!(
        "peak RSS of `wasm-ccm call`: {} MiB growing nothing, {} MiB growing 4 x 60 MiB \
         under memoryMiB 256, {} MiB asking 4 x 60 MiB under memoryMiB {BUDGET_MIB}",
        idle >> 10,
        allowed >> 10,
        over >> 10
    );
    assert_ne!(
        code, 0,
        "4 x 60 MiB under memoryMiB {BUDGET_MIB} was allowed"
    );
    assert!(
        stderr.contains("initialize") && stderr.contains("provider trapped (unreachable)"),
        "{stderr}"
    );
    let held_mib = allowed.saturating_sub(idle) >> 10;
    assert!(
        held_mib >= 160,
        "4 x 60 MiB written, but only {held_mib} MiB more resident: the measure misses the \
         guest's pages"
    );
    let grown_mib = over.saturating_sub(idle) >> 10;
    assert!(
        grown_mib <= BUDGET_MIB + 48,
        "asked 4 x 60 MiB under memoryMiB {BUDGET_MIB}: the host grew by {grown_mib} MiB"
    );
}

/// Runs `wasm-ccm call` on the fixture in `dir` (`identity.provider-name`, so only
/// loading and `initialize` run) with a cloud config asking `grow_mib` MiB of each
/// memory: its exit code, its stderr and its peak resident set size in KiB.
fn call_fixture(dir: &ProviderDir, grow_mib: u32) -> (i32, String, u64) {
    let config = dir.dir.path().join(format!("grow-{grow_mib}.conf"));
    std::fs::write(&config, format!("grow-mib={grow_mib}")).unwrap();
    let stderr = dir.dir.path().join(format!("grow-{grow_mib}.stderr"));
    let child = Command::new(wasm_ccm_bin())
        .arg("call")
        .arg(&dir.wasm)
        .arg("--cloud-config")
        .arg(&config)
        .arg("identity.provider-name")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .expect("start wasm-ccm call");
    let (code, peak_kib) = wait_with_peak_rss(child);
    (code, std::fs::read_to_string(&stderr).unwrap(), peak_kib)
}

/// Waits for `child` to exit: its exit code (-1 when a signal ended it) and its peak
/// resident set size in KiB as the kernel counted it (`wait4`'s `ru_maxrss`).
fn wait_with_peak_rss(child: Child) -> (i32, u64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `rusage` is plain integers; all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4(2) on our own child, which nothing else waits for (`child` is
        // dropped unwaited), with pointers to live locals.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if waited == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::Interrupted,
            "wait4({pid}): {err}"
        );
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, usage.ru_maxrss as u64)
}
