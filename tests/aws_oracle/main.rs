//! Upstream as the oracle: the same scenarios through cloud-provider-aws (built from its
//! Go module by `scripts/ensure-upstream-ccm.sh`) and through wasm-ccm with the AWS
//! provider, each against a fresh moto world and a fresh real kube-apiserver, with the
//! same cloud config file. After each phase converges, what each left (the cloud as
//! moto describes it, the Services and Nodes, the events' reasons) is flattened with
//! every per-run ID replaced by what it stands for, and the two are compared. The test
//! prints a table (scenario: equal, or the differing fields) and fails on a difference
//! that guests/aws/README.md does not list with its reason.

mod side;
mod snapshot;

use wasm_ccm_tests::oracle::{Comparison, group_of, listed};

/// The phases each side goes through; a snapshot after each.
pub const PHASES: [&str; 4] = ["created", "changed", "removed", "shared probe"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_provider_aws_and_wasm_ccm_leave_the_same_cloud() {
    let upstream = side::run(side::Side::Upstream).await;
    let ours = side::run(side::Side::WasmCcm).await;
    let groups: Vec<String> = side::scenario_names()
        .into_iter()
        .chain(["nodes", "routes", "security groups", "elastic IPs"].map(String::from))
        .collect();
    let readme = include_str!("../../guests/aws/README.md");
    Comparison::new(
        &PHASES,
        &upstream,
        &ours,
        &groups,
        scenario_of,
        &listed(readme),
    )
    .check("guests/aws/README.md");
}

/// The scenario a key belongs to: the Service its load balancer or object names, a
/// target group by its name (`k8s-default-<first 8 of the Service's name>-`), else
/// `nodes`, `routes`, `security groups` or `elastic IPs`. A rule's source group does not
/// name the owner: the nodes' rule admitting a load balancer's own group
/// (`sg/nodes[0].ipPermissions[3].groups[<sg:k8s-elb-<lb:web>>]…`) is `security groups`'s.
fn scenario_of(key: &str) -> String {
    let owner = key.split(".groups[").next().unwrap_or(key);
    if let Some(at) = owner.find("<lb:") {
        let rest = &owner[at + 4..];
        return rest[..rest.find('>').unwrap_or(rest.len())].to_owned();
    }
    for prefix in ["svc/", "events/service/"] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
        }
    }
    if let Some(rest) = key.strip_prefix("tg/k8s-default-") {
        // The longest name first: `nlb-eip-` is not `nlb`'s.
        let mut names = side::scenario_names();
        names.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let owner = names.into_iter().find(|s| {
            let short: String = s.chars().take(8).collect();
            rest.starts_with(&format!("{short}-"))
        });
        if let Some(owner) = owner {
            return owner;
        }
    }
    let groups = [
        ("node/", "nodes"),
        ("events/node/", "nodes"),
        ("routes", "routes"),
        ("sg/", "security groups"),
        ("eips", "elastic IPs"),
    ];
    group_of(key, &groups)
}
