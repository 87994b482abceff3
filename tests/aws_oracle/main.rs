//! Upstream as the oracle: the same scenarios through cloud-provider-aws (built from its
//! Go module by `scripts/ensure-upstream-ccm.sh`) and through wasm-ccm with the AWS
//! provider, each against a fresh moto world and a fresh real kube-apiserver, with the
//! same cloud config file. After each phase converges, what each left (the cloud as
//! moto describes it, the Services and Nodes, the events' reasons) is flattened with
//! every per-run ID replaced by what it stands for, and the two are compared. The test
//! prints a table (scenario: equal, or the differing fields) and fails on a difference
//! that guests/aws/README.md does not list with its reason.

mod differences;
mod side;
mod snapshot;

use std::collections::BTreeMap;

use snapshot::Flat;

/// The phases each side goes through; a snapshot after each.
pub const PHASES: [&str; 3] = ["created", "changed", "removed"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_provider_aws_and_wasm_ccm_leave_the_same_cloud() {
    let upstream = side::run(side::Side::Upstream).await;
    let ours = side::run(side::Side::WasmCcm).await;
    let listed = differences::listed();
    let mut unlisted = Vec::new();
    let mut table = String::from("phase    | scenario | result\n");
    for (phase, (theirs, mine)) in PHASES.iter().zip(upstream.iter().zip(ours.iter())) {
        let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let groups = ["nodes", "routes", "security groups", "elastic IPs"];
        for scenario in side::scenario_names()
            .into_iter()
            .chain(groups.map(String::from))
        {
            rows.entry(scenario).or_default();
        }
        let compared: std::collections::BTreeSet<&String> =
            theirs.keys().chain(mine.keys()).collect();
        table.push_str(&format!(
            "{phase:8} | {} fields compared |\n",
            compared.len()
        ));
        for (key, (a, b)) in differing(theirs, mine) {
            let scenario = differences::scenario_of(&key);
            let listed_as = listed.iter().find(|d| d.matches(&scenario, &key));
            let mark = if listed_as.is_some() {
                "listed"
            } else {
                "UNLISTED"
            };
            rows.entry(scenario.clone())
                .or_default()
                .push(format!("{mark}: {key}: upstream {a:?}, wasm-ccm {b:?}"));
            if listed_as.is_none() {
                unlisted.push(format!("{phase} {scenario} {key}"));
            }
        }
        for (scenario, diffs) in rows {
            if diffs.is_empty() {
                table.push_str(&format!("{phase:8} | {scenario} | equal\n"));
            } else {
                for d in diffs {
                    table.push_str(&format!("{phase:8} | {scenario} | {d}\n"));
                }
            }
        }
    }
    println!("{table}");
    assert!(
        unlisted.is_empty(),
        "differences from cloud-provider-aws not listed in guests/aws/README.md:\n{}\n\n{table}",
        unlisted.join("\n")
    );
}

/// A key's value on each side (`None`: absent there).
type Values = (Option<String>, Option<String>);

/// Every key whose value differs.
fn differing(a: &Flat, b: &Flat) -> Vec<(String, Values)> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| ((*k).clone(), (a.get(k).cloned(), b.get(k).cloned())))
        .collect()
}
