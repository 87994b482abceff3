//! Compiling less: a new version reuses the functions it shares with the serving one,
//! and a restart with a warm compile cache does not compile.

use super::*;

/// The function cache: a new version with the same code (new bytes) takes its
/// functions from the serving version's compilation instead of compiling them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_reuses_the_functions_it_shares_with_the_serving_one() {
    let swap = SwapStack::start().await;
    let port = listening_port();
    let _ccm = swap.controller_manager(port, &["--leader-elect=false"]);
    wait_serving(port, &sha256_hex(&swap.reference)).await;
    let functions = |m: &str| {
        let count = |result: &str| {
            metric(
                m,
                &format!("wasm_ccm_compiled_functions_total{{result=\"{result}\"}}"),
            )
        };
        (count("compiled"), count("reused"))
    };
    let m = metrics(port).await;
    let (compiled, reused) = functions(&m);
    // A component has identical functions (adapters, generic code): the first
    // compilation reuses those already.
    assert!(compiled > 100.0 && compiled > reused, "{m}");
    assert!(metric(&m, "wasm_ccm_function_cache_bytes") > 0.0, "{m}");

    let v2 = with_custom_section(&swap.reference, "v2");
    swap.publish(&v2);
    wait_serving(port, &sha256_hex(&v2)).await;
    let m = metrics(port).await;
    let (compiled_v2, reused_v2) = functions(&m);
    let total = compiled + reused;
    assert_eq!(compiled_v2 + reused_v2 - total, total, "{m}");
    // Not all: cranelift-codegen 0.135's `DataFlowGraph::clear` keeps a reused
    // compiler context's exception tables, which enter the next function's cache key,
    // so which functions miss depends on which thread compiled what (10 to 30% of them
    // on 2 busy cores).
    assert!(
        compiled_v2 - compiled < total / 2.0,
        "most functions reused: {m}"
    );
    assert_eq!(failed_calls(&m), 0.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_warm_compile_cache_skips_compiling() {
    let swap = SwapStack::start().await;
    let cache = TempDir::new("compile-cache");
    let cache_flag = format!("--compile-cache-dir={}", cache.path().display());
    let args = ["--leader-elect=false", cache_flag.as_str()];
    let cache_result = |m: &str, result: &str| {
        metric(
            m,
            &format!("wasm_ccm_compile_cache_total{{result=\"{result}\"}}"),
        )
    };

    let port = listening_port();
    let mut first = swap.controller_manager(port, &args);
    wait_serving(port, &sha256_hex(&swap.reference)).await;
    let m = metrics(port).await;
    assert_eq!(cache_result(&m, "miss"), 1.0, "{m}");
    first.kill().await.unwrap();
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        entries.len() == 1 && entries[0].ends_with(".cwasm"),
        "{entries:?}"
    );

    let port = listening_port();
    let _second = swap.controller_manager(port, &args);
    wait_serving(port, &sha256_hex(&swap.reference)).await;
    let m = metrics(port).await;
    assert_eq!(cache_result(&m, "hit"), 1.0, "{m}");
    assert_eq!(cache_result(&m, "miss"), 0.0, "{m}");
    // Nothing is ever written into the providers directory (a ConfigMap).
    assert!(
        std::fs::read_dir(swap.dir())
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().ends_with(".cwasm"))
    );
}
