//! The controller manager's flags, with upstream's names and defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::controllers::node_lifecycle::guard::GuardOptions;
use crate::controllers::{self, Controller, Settings, route::Cidr};
use crate::flags::{parse_go_bool, parse_go_duration, parse_percent};

/// Flags of `wasm-ccm` (the controller manager).
#[derive(Debug, Clone, Args)]
pub struct DaemonArgs {
    /// The provider to run: the component in --providers-dir whose provider name is this.
    #[arg(long)]
    pub cloud_provider: Option<String>,
    /// Directory holding provider components (`NAME.wasm`) and their policies (`NAME.yaml`).
    #[arg(long, default_value = "/etc/wasm-ccm/providers")]
    pub providers_dir: PathBuf,
    /// The cloud provider configuration file, passed to the provider's `initialize`.
    #[arg(long)]
    pub cloud_config: Option<PathBuf>,
    /// Path to a kubeconfig; in-cluster configuration when absent.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Controllers to enable: `*` for all, `foo` to enable, `-foo` to disable.
    /// Known: cloud-node, cloud-node-lifecycle, service, route (upstream's names).
    #[arg(long, default_value = "*", value_delimiter = ',')]
    pub controllers: Vec<String>,
    /// Take a leader lease before running the controllers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub leader_elect: bool,
    #[arg(long, default_value = "15s", value_parser = parse_go_duration)]
    pub leader_elect_lease_duration: Duration,
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub leader_elect_renew_deadline: Duration,
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub leader_elect_retry_period: Duration,
    #[arg(long, default_value = "cloud-controller-manager")]
    pub leader_elect_resource_name: String,
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// The cluster's name, passed to the provider.
    #[arg(long, default_value = "kubernetes")]
    pub cluster_name: String,
    /// The cluster's pod CIDRs (at most two: one IPv4, one IPv6); needed when the route
    /// controller runs (--configure-cloud-routes and a provider exporting routes).
    #[arg(long, value_delimiter = ',')]
    pub cluster_cidr: Vec<String>,
    /// Whether the route controller programs cloud routes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub configure_cloud_routes: bool,
    /// Period of the route controller.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub route_reconciliation_period: Duration,
    /// Feature gates, as upstream's `Name=true,...`: only
    /// `CloudControllerManagerWatchBasedRoutesReconciliation` (off by default) is known.
    #[arg(long, default_value = "", value_parser = super::feature_gates::parse)]
    pub feature_gates: super::feature_gates::FeatureGates,
    /// Period of the cloud-node-lifecycle controller.
    #[arg(long, default_value = "5s", value_parser = parse_go_duration)]
    pub node_monitor_period: Duration,
    /// Period of node address updates by the cloud-node controller.
    #[arg(long, default_value = "5m", value_parser = parse_go_duration)]
    pub node_status_update_frequency: Duration,
    /// Nodes initialized concurrently.
    #[arg(long, default_value_t = 1)]
    pub concurrent_node_syncs: u16,
    /// Services synced concurrently.
    #[arg(long, default_value_t = 1)]
    pub concurrent_service_syncs: u16,
    /// The most Nodes asked about in one batched provider call (providers exporting
    /// `instances-batch`): the status pass, the lifecycle pass and joining Nodes. 1 asks
    /// about each Node on its own, as upstream.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u16).range(1..=5000))]
    pub instances_batch_size: u16,
    /// How long a joining Node waits for others to be initialized in the same batched
    /// provider call (providers exporting `instances-batch`).
    #[arg(long, default_value = "200ms", value_parser = parse_go_duration)]
    pub node_init_batch_window: Duration,
    /// Node deletion guard: "does not exist" answers needed, in passes at least one
    /// --node-monitor-period apart, before a NotReady Node is deleted (1 = upstream).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub node_deletion_confirmations: u32,
    /// Node deletion guard: the most Nodes deleted per --node-deletion-window (the
    /// larger of this and --node-deletion-limit-percent applies); confirmed Nodes over
    /// it are held with a Warning event `NodeDeletionHeld`.
    #[arg(long, default_value_t = 2)]
    pub node_deletion_limit: u32,
    /// Node deletion guard: the most Nodes deleted per window, in percent of all Nodes.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub node_deletion_limit_percent: u32,
    /// Node deletion guard: the window of --node-deletion-limit.
    #[arg(long, default_value = "10m", value_parser = parse_go_duration)]
    pub node_deletion_window: Duration,
    /// Node deletion guard: for this long after a hot swap, the new provider version's
    /// "does not exist" answers do not count.
    #[arg(long, default_value = "3m", value_parser = parse_go_duration)]
    pub node_deletion_swap_grace: Duration,
    /// Start even when the provider answers `has-cluster-id` false (its resources are
    /// not tagged with a cluster ID), as upstream's flag of the same name.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub allow_untagged_cloud: bool,
    /// Upstream's per-controller ServiceAccounts; only `false` is served (see
    /// [`parse_use_service_account_credentials`]).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_use_service_account_credentials)]
    pub use_service_account_credentials: bool,
    /// Requests per second the Kubernetes client may send (a token bucket every
    /// request, watches included, waits for), as upstream: 0 means 5, a negative value
    /// no client-side limit.
    #[arg(long, default_value_t = 20.0, allow_negative_numbers = true)]
    pub kube_api_qps: f32,
    /// The Kubernetes client's burst above `--kube-api-qps` (at least 1).
    #[arg(long, default_value_t = 30, allow_negative_numbers = true)]
    pub kube_api_burst: i32,
    /// Content type of requests to the API server. Only `application/json`: the
    /// Kubernetes types wasm-ccm uses have no protobuf encoding (upstream's default,
    /// `application/vnd.kubernetes.protobuf`, is refused with that reason).
    #[arg(long, default_value = "application/json")]
    pub kube_api_content_type: String,
    /// The secure port serving health and metrics.
    #[command(flatten)]
    pub serving: crate::serving::ServingArgs,
    /// The directory holding the credential files policies name (the mounted Secret).
    /// A policy naming a file outside it — directly or through a symlink — is refused.
    #[arg(
        long,
        env = "WASM_CCM_CREDENTIALS_DIR",
        default_value = "/etc/wasm-ccm/credentials"
    )]
    pub credentials_dir: PathBuf,
    /// The most memory a provider's policy may let it use in the worst case (every
    /// pooled instance at its full memory, every request in flight with full bodies);
    /// a policy over it is refused. Bytes, or with a suffix Ki, Mi or Gi. The default
    /// fits deploy/'s container memory limit (512Mi) with room for the host.
    #[arg(long, default_value = "384Mi", value_parser = parse_quantity)]
    pub provider_memory_budget: u64,
    /// Writable directory (private to this process, e.g. an `emptyDir`) where compiled
    /// providers are cached, so restarts and swaps back to known content skip compiling.
    #[arg(long, env = "WASM_CCM_COMPILE_CACHE_DIR")]
    pub compile_cache_dir: Option<PathBuf>,
    /// Writable directory (private to this process, e.g. an `emptyDir`) where
    /// components pulled from an OCI registry (`NAME.source.yaml`) are kept by digest,
    /// so a restart serves them while the registry is down.
    #[arg(long, env = "WASM_CCM_PROVIDER_CACHE_DIR")]
    pub provider_cache_dir: Option<PathBuf>,
    /// How long pulling and verifying a component from an OCI registry may take, all
    /// steps together; a registry slower than this is a failed reload, retried on
    /// the next rescan.
    #[arg(long, default_value = "2m", value_parser = parse_go_duration)]
    pub provider_pull_timeout: std::time::Duration,
    /// A directory of cosign public keys (`*.pub`, `*.pem`; mount it from an object
    /// other than the providers ConfigMap). Every provider must then carry a signature
    /// by one of them: a component from a registry in the registry, one in the
    /// providers directory as `NAME.wasm.sig` beside it. Keys the ConfigMap lists
    /// (`verify.keys`, `requireSignature.keys`) are narrowed to these, never added.
    /// Read at start-up.
    #[arg(long, env = "WASM_CCM_PROVIDER_TRUSTED_KEYS")]
    pub provider_trusted_keys: Option<PathBuf>,
    /// Watch --providers-dir and --cloud-config and switch to a changed provider
    /// without restarting.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub provider_hot_swap: bool,
    /// Hot swap canary: a new provider version shadows the serving one this long
    /// (asked the same read-only questions, its answers compared and never used)
    /// before it may serve; 0s (the default) swaps at once.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration)]
    pub provider_canary_period: Duration,
    /// Hot swap canary: the largest share (percent) of compared calls on which the new
    /// version may fail where the serving one answered.
    #[arg(long, default_value_t = 5.0, value_parser = parse_percent)]
    pub provider_canary_max_error_percent: f64,
    /// Hot swap canary: the largest share (percent) of compared calls it may answer
    /// differently.
    #[arg(long, default_value_t = 5.0, value_parser = parse_percent)]
    pub provider_canary_max_difference_percent: f64,
    /// How often the watched files are also re-read in full, in case a change
    /// notification was missed.
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    pub provider_rescan_period: Duration,
}

/// `--use-service-account-credentials`: only `false` is served. With `true`, upstream
/// gives each controller the token of its own ServiceAccount; wasm-ccm's controllers
/// use the controller manager's identity, which deploy/'s ClusterRole authorizes.
pub fn parse_use_service_account_credentials(text: &str) -> Result<bool, String> {
    match parse_go_bool(text)? {
        false => Ok(false),
        true => Err(
            "true is not supported: wasm-ccm's controllers use the controller manager's own \
             identity (deploy/'s ClusterRole system:wasm-ccm), not a ServiceAccount per \
             controller; set it to false"
                .into(),
        ),
    }
}

/// Parses a byte quantity: `402653184`, `384Mi`, `1Gi`, `512Ki`.
pub fn parse_quantity(text: &str) -> Result<u64, String> {
    let bad =
        || format!("invalid quantity {text:?}: use bytes or a suffix Ki, Mi or Gi, e.g. 384Mi");
    let (number, scale) = match text.trim() {
        t if t.ends_with("Gi") => (&t[..t.len() - 2], 1u64 << 30),
        t if t.ends_with("Mi") => (&t[..t.len() - 2], 1 << 20),
        t if t.ends_with("Ki") => (&t[..t.len() - 2], 1 << 10),
        t => (t, 1),
    };
    let number: u64 = number.parse().map_err(|_| bad())?;
    number.checked_mul(scale).ok_or_else(bad)
}

impl DaemonArgs {
    /// What the controllers take from the flags. `--cluster-cidr` is left for
    /// [`Self::cluster_cidrs`]: upstream reads it only when the route controller starts.
    pub fn controller_settings(&self) -> Result<Settings, String> {
        Ok(Settings {
            cluster_name: self.cluster_name.clone(),
            cluster_cidrs: Vec::new(),
            node_status_update_frequency: self.node_status_update_frequency,
            node_monitor_period: self.node_monitor_period,
            route_reconciliation_period: self.route_reconciliation_period,
            watch_based_routes: self.feature_gates.watch_based_routes,
            concurrent_node_syncs: self.concurrent_node_syncs,
            concurrent_service_syncs: self.concurrent_service_syncs,
            instances_batch_size: usize::from(self.instances_batch_size),
            node_init_batch_window: self.node_init_batch_window,
            node_deletion_guard: GuardOptions {
                confirmations: self.node_deletion_confirmations,
                spacing: self.node_monitor_period,
                limit: self.node_deletion_limit,
                limit_percent: self.node_deletion_limit_percent,
                window: self.node_deletion_window,
                swap_grace: self.node_deletion_swap_grace,
            },
        })
    }

    /// `--cluster-cidr`, as upstream's `startRouteController` checks it: at least one
    /// CIDR, at most two, and two are dual stack (one IPv4, one IPv6).
    pub fn cluster_cidrs(&self) -> Result<Vec<Cidr>, String> {
        let cluster_cidrs = self
            .cluster_cidr
            .iter()
            .map(|c| Cidr::parse(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("--cluster-cidr: {e}"))?;
        if cluster_cidrs.is_empty() {
            return Err(
                "the route controller needs --cluster-cidr (or --configure-cloud-routes=false, or --controllers=*,-route)".into(),
            );
        }
        if cluster_cidrs.len() > 2 {
            return Err("--cluster-cidr: at most two CIDRs (dual stack)".into());
        }
        if let [a, b] = cluster_cidrs.as_slice()
            && a.is_ipv6() == b.is_ipv6()
        {
            return Err(
                "--cluster-cidr: two CIDRs must be one IPv4 and one IPv6 (dual stack)".into(),
            );
        }
        Ok(cluster_cidrs)
    }
}

/// Which known controllers `--controllers` enables (upstream rules: `*` enables all,
/// `name` enables, `-name` disables; unknown names are errors).
pub fn enabled_controllers(list: &[String]) -> Result<Vec<&'static Controller>, String> {
    let mut all = false;
    let mut on = Vec::new();
    let mut off = Vec::new();
    for item in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        if item == "*" {
            all = true;
            continue;
        }
        let (name, disable) = match item.strip_prefix('-') {
            Some(name) => (name, true),
            None => (item, false),
        };
        let known = controllers::find(name).ok_or_else(|| {
            let names: Vec<&str> = controllers::ALL.iter().map(|c| c.name).collect();
            format!(
                "--controllers: unknown controller {name:?}; known: {}",
                names.join(", ")
            )
        })?;
        if disable {
            off.push(known.name)
        } else {
            on.push(known.name)
        }
    }
    Ok(controllers::ALL
        .iter()
        .filter(|c| (all || on.contains(&c.name)) && !off.contains(&c.name))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("384Mi").unwrap(), 384 << 20);
        assert_eq!(parse_quantity("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_quantity("4096").unwrap(), 4096);
        for bad in ["", "Mi", "1.5Gi", "1G", "-1Mi", "99999999999999999999Gi"] {
            assert!(parse_quantity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn controller_selection() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let enabled = |v: &[&str]| {
            enabled_controllers(&s(v))
                .unwrap()
                .iter()
                .map(|c| c.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            enabled(&["*"]),
            ["cloud-node", "cloud-node-lifecycle", "service", "route"]
        );
        assert_eq!(
            enabled(&["*", "-cloud-node-lifecycle", "-route"]),
            ["cloud-node", "service"]
        );
        assert_eq!(enabled(&["cloud-node-lifecycle"]), ["cloud-node-lifecycle"]);
        assert!(
            enabled_controllers(&s(&["nodes"]))
                .unwrap_err()
                .contains("unknown controller")
        );
    }
}
