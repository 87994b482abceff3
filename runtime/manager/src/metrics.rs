//! The controllers' metrics, registered in the host's registry
//! ([`wasm_ccm_host::metrics::Metrics`], which `/metrics` serves).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use wasm_ccm_host::metrics::{Metrics, latency_histogram};

/// Labels of the controller reconcile metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The controller's name.
    pub controller: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels carrying only the controller name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The controller's name.
    pub controller: String,
}

/// The families recorded by the controllers.
pub struct ControllerMetrics {
    /// `wasm_ccm_controller_reconciles_total{controller,result}`.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// `wasm_ccm_controller_reconcile_duration_seconds{controller}`.
    pub reconcile_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    /// Upstream's `initial_node_sync_delay_seconds`: Node creation to initialization.
    pub initial_node_sync_delay: Histogram,
    /// Objects waiting for a retry after a failed reconcile (the retry queue's depth).
    pub retries_pending: Family<ControllerLabels, Gauge>,
    /// `wasm_ccm_provider_answers_refused_total{controller,field}`: provider answers
    /// refused before they reached the cluster.
    pub answers_refused: Family<RefusedLabels, Counter>,
    /// Metrics under upstream `k8s.io/cloud-provider`'s names.
    pub upstream: UpstreamMetrics,
    /// The node deletion guard's.
    pub guard: GuardMetrics,
}

/// Labels of refused provider answers.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// The controller's name.
    pub controller: String,
    /// The field of the answer (`provider-id`, `addresses`, `zone`, ...).
    pub field: String,
}

/// Labels of the node deletion guard's answers.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GuardAnswerLabels {
    /// `counted`, `too_soon`, `fresh_version` or `confirmed`.
    pub answer: String,
}

/// The node deletion guard's metrics.
#[derive(Clone, Default)]
pub struct GuardMetrics {
    /// `wasm_ccm_node_deletion_guard_held_nodes`: Nodes confirmed gone but held by the
    /// limit now.
    pub held_nodes: Gauge,
    /// `wasm_ccm_node_deletion_guard_holds_total`: Nodes held (counted once per hold).
    pub holds: Counter,
    /// `wasm_ccm_node_deletion_guard_answers_total{answer}`: "does not exist" answers
    /// and what the guard made of them.
    pub answers: Family<GuardAnswerLabels, Counter>,
}

impl GuardMetrics {
    /// Counts one "does not exist" answer, by what the guard made of it (one of the
    /// labels [`ControllerMetrics::register`] was given).
    pub fn answer(&self, answer: &str) {
        self.answers
            .get_or_create(&GuardAnswerLabels {
                answer: answer.into(),
            })
            .inc();
    }

    fn register(&self, metrics: &Metrics) {
        metrics.register(
            "node_deletion_guard_held_nodes",
            "Nodes the provider says are gone whose deletion the node deletion guard holds now (the limit per window is reached)",
            self.held_nodes.clone(),
        );
        metrics.register(
            "node_deletion_guard_holds",
            "Nodes held by the node deletion guard's limit (once per hold)",
            self.holds.clone(),
        );
        metrics.register(
            "node_deletion_guard_answers",
            "Answers \"the instance does not exist\" for NotReady Nodes, by what the guard made of them: counted (more confirmations needed), too_soon (within one --node-monitor-period of the last), fresh_version (from a version swapped in within --node-deletion-swap-grace), confirmed",
            self.answers.clone(),
        );
    }
}

/// Upstream `k8s.io/cloud-provider`'s controller metrics, under its names and buckets
/// (served unprefixed beside ours).
#[derive(Clone)]
pub struct UpstreamMetrics {
    /// `node_controller_cloud_provider_taint_removal_delay_seconds`.
    pub taint_removal_delay: Histogram,
    /// `node_controller_initial_node_sync_delay_seconds`.
    pub initial_node_sync_delay: Histogram,
    /// `service_controller_loadbalancer_sync_total`: host updates of load balancers.
    pub loadbalancer_sync: Counter,
    /// `service_controller_nodesync_error_total`: failed host updates in node syncs.
    pub nodesync_error: Counter,
    /// `service_controller_nodesync_latency_seconds`: one node sync over every Service.
    pub nodesync_latency: Histogram,
    /// `service_controller_update_loadbalancer_host_latency_seconds`: one host update.
    pub update_loadbalancer_host_latency: Histogram,
    /// `route_controller_route_sync_total`: route reconciliations.
    pub route_sync: Counter,
}

impl UpstreamMetrics {
    fn new() -> Self {
        // Upstream's buckets: 1 s ×4 to ~17 min for nodes, 1 s ×2 to 16,384 s for services.
        let node = || Histogram::new(exponential_buckets(1.0, 4.0, 6));
        let service = || Histogram::new(exponential_buckets(1.0, 2.0, 15));
        Self {
            taint_removal_delay: node(),
            initial_node_sync_delay: node(),
            loadbalancer_sync: Counter::default(),
            nodesync_error: Counter::default(),
            nodesync_latency: service(),
            update_loadbalancer_host_latency: service(),
            route_sync: Counter::default(),
        }
    }

    fn register(&self, metrics: &Metrics) {
        let m = self.clone();
        metrics.register_upstream(
            "node_controller_cloud_provider_taint_removal_delay_seconds",
            "Number of seconds after node creation when NodeController removed the cloud-provider taint of a single node.",
            m.taint_removal_delay,
        );
        metrics.register_upstream(
            "node_controller_initial_node_sync_delay_seconds",
            "Number of seconds after node creation when NodeController finished the initial synchronization of a single node.",
            m.initial_node_sync_delay,
        );
        metrics.register_upstream(
            "service_controller_loadbalancer_sync",
            "A metric counting the amount of times any load balancer has been configured, as an effect of service/node changes on the cluster",
            m.loadbalancer_sync,
        );
        metrics.register_upstream(
            "service_controller_nodesync_error",
            "A metric counting the amount of times any load balancer has been configured and errored, as an effect of node changes on the cluster",
            m.nodesync_error,
        );
        metrics.register_upstream(
            "service_controller_nodesync_latency_seconds",
            "A metric measuring the latency for nodesync which updates loadbalancer hosts on cluster node updates.",
            m.nodesync_latency,
        );
        metrics.register_upstream(
            "service_controller_update_loadbalancer_host_latency_seconds",
            "A metric measuring the latency for updating each load balancer hosts.",
            m.update_loadbalancer_host_latency,
        );
        metrics.register_upstream(
            "route_controller_route_sync",
            "A metric counting the amount of times routes have been synced with the cloud provider.",
            m.route_sync,
        );
    }
}

impl std::fmt::Debug for ControllerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControllerMetrics")
    }
}

impl ControllerMetrics {
    /// Creates the families and registers them in `metrics`. `guard_answers` are the
    /// values of the node deletion guard's `answer` label, exported at 0 from the start
    /// (the guard owns them: `controllers::node_lifecycle::guard::Answer::LABELS`).
    pub fn register(metrics: &Metrics, guard_answers: &[&str]) -> Self {
        let this = Self {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(latency_histogram),
            initial_node_sync_delay: Histogram::new(exponential_buckets(0.1, 2.0, 16)),
            retries_pending: Family::default(),
            upstream: UpstreamMetrics::new(),
            answers_refused: Family::default(),
            guard: GuardMetrics::default(),
        };
        metrics.register(
            "provider_answers_refused",
            "Provider answers refused before they reached the cluster (invalid address, provider ID of another scheme or changed, invalid label, invalid load balancer status), by controller and field",
            this.answers_refused.clone(),
        );
        this.upstream.register(metrics);
        this.guard.register(metrics);
        // Rare events at 0, so they are exported before the first and an alert's
        // increase() sees it.
        let refusable = [
            ("cloud-node", "provider-id"),
            ("cloud-node", "addresses"),
            ("cloud-node", "instance-type"),
            ("cloud-node", "zone"),
            ("cloud-node", "region"),
            ("cloud-node", "additional-labels"),
            ("service", "load-balancer-status"),
        ];
        for (controller, field) in refusable {
            let _ = this.answers_refused.get_or_create(&RefusedLabels {
                controller: controller.into(),
                field: field.into(),
            });
        }
        for answer in guard_answers {
            let _ = this.guard.answers.get_or_create(&GuardAnswerLabels {
                answer: (*answer).into(),
            });
        }
        metrics.register(
            "controller_reconciles",
            "Reconciles by controller and result",
            this.reconciles.clone(),
        );
        metrics.register(
            "controller_reconcile_duration_seconds",
            "Time spent in one reconcile, by controller",
            this.reconcile_duration.clone(),
        );
        metrics.register(
            "node_controller_initial_node_sync_delay_seconds",
            "Delay between a Node's creation and its initialization by the cloud-node controller",
            this.initial_node_sync_delay.clone(),
        );
        metrics.register(
            "controller_retries_pending",
            "Objects whose last reconcile failed, waiting for their retry (the depth of the controller's retry queue)",
            this.retries_pending.clone(),
        );
        this
    }

    /// Counts one refused answer.
    pub fn answer_refused(&self, controller: &str, field: &str) {
        self.answers_refused
            .get_or_create(&RefusedLabels {
                controller: controller.into(),
                field: field.into(),
            })
            .inc();
    }

    /// The retry-queue gauge of `controller`.
    pub fn retries_pending(&self, controller: &str) -> Gauge {
        self.retries_pending
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .clone()
    }

    /// Counts one reconcile of `controller` that started at `started`.
    pub fn record(&self, controller: &str, started: std::time::Instant, ok: bool) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
                result: if ok { "success" } else { "error" }.into(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(started.elapsed().as_secs_f64());
    }
}

/// The `name` label of client-go's leader election metrics: the Lease's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabel {
    name: String,
}

/// client-go's `leader_election_master_status{name}` under its upstream name: 1 while
/// this replica holds the Lease `lease` and runs the controllers (always, without
/// leader election), 0 otherwise. The returned gauge is the series.
pub fn leader_status(metrics: &Metrics, lease: &str) -> Gauge {
    let family = Family::<LeaseLabel, Gauge>::default();
    metrics.register_upstream(
        "leader_election_master_status",
        "Whether this replica is the leader of the Lease (1) or not (0), as client-go reports it",
        family.clone(),
    );
    family
        .get_or_create(&LeaseLabel {
            name: lease.to_owned(),
        })
        .clone()
}
