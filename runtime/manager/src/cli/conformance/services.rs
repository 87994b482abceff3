//! The load balancer checks (`--service`, `--elsewhere-service`) and the route checks
//! (`--route-cidr`): each touches only what it creates, and cleans it up.

use serde_json::{Value, json};
use wasm_ccm_host::contract::types as wit;
use wasm_ccm_host::provider::{CloudError, Provider};

use super::Conformance;
use super::{Outcome, Report, check, describe};
use crate::cli::call::{CallError, service};

/// A Service another controller serves: `ensure-load-balancer` answers
/// `implemented-elsewhere` (upstream: the service controller then leaves it alone) and
/// nothing is created for it.
pub(super) async fn elsewhere_checks(
    provider: &Provider,
    request: &Conformance,
    svc: &Value,
    hosts: &[wit::Node],
    report: &mut Report,
) -> Result<(), CallError> {
    let svc = service(&with_uid(svc, "elsewhere"))?;
    let lb = provider.load_balancer().expect("checked by the caller");
    let cluster = &request.cluster_name;
    report.record(
        "ensure-load-balancer for a Service served elsewhere is implemented-elsewhere",
        match lb.ensure_load_balancer(cluster, &svc, hosts).await {
            Err(err) if matches!(err.cloud(), Some(CloudError::ImplementedElsewhere)) => {
                Outcome::Pass
            }
            Err(err) => Outcome::Fail(describe(&err)),
            Ok(status) => {
                // Clean up what was created by mistake.
                let _ = lb.ensure_load_balancer_deleted(cluster, &svc).await;
                Outcome::Fail(format!("created a load balancer: {status:?}"))
            }
        },
    );
    report.record(
        "nothing is created for a Service served elsewhere",
        match lb.get_load_balancer(cluster, &svc).await {
            Ok(None) => Outcome::Pass,
            Err(err) if matches!(err.cloud(), Some(CloudError::ImplementedElsewhere)) => {
                Outcome::Pass
            }
            Ok(Some(status)) => Outcome::Fail(format!("get-load-balancer finds {status:?}")),
            Err(err) => Outcome::Fail(describe(&err)),
        },
    );
    Ok(())
}

/// `svc` with a UID of the check's own when it has none, so only what the check
/// creates is touched.
fn with_uid(svc: &Value, role: &str) -> Value {
    let mut svc = svc.clone();
    if svc
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        svc["metadata"]["uid"] = json!(format!(
            "wasm-ccm-conformance-{role}-{}",
            std::process::id()
        ));
    }
    svc
}

pub(super) async fn load_balancer_checks(
    provider: &Provider,
    request: &Conformance,
    svc: &Value,
    hosts: &[wit::Node],
    report: &mut Report,
) -> Result<(), CallError> {
    let svc = service(&with_uid(svc, "lb"))?;
    let lb = provider.load_balancer().expect("checked by the caller");
    let cluster = &request.cluster_name;
    let first = lb.ensure_load_balancer(cluster, &svc, hosts).await;
    let second = lb.ensure_load_balancer(cluster, &svc, hosts).await;
    report.record(
        "ensure-load-balancer twice gives the same status",
        match (&first, &second) {
            (Ok(a), Ok(b)) if a == b => Outcome::Pass,
            (Ok(a), Ok(b)) => Outcome::Fail(format!("{a:?} then {b:?}")),
            (Err(err), _) | (_, Err(err)) => Outcome::Fail(describe(err)),
        },
    );
    // `get-load-balancer` finds the load balancer with the status ensure gave.
    let as_ensured = |found: &Option<wit::LoadBalancerStatus>| match (found, &first) {
        (Some(status), Ok(ensured)) if status == ensured => None,
        (Some(status), _) => Some(format!("status {status:?} differs from the ensured one")),
        (None, _) => Some("none".into()),
    };
    report.record(
        "get-load-balancer finds it",
        check(lb.get_load_balancer(cluster, &svc).await, as_ensured),
    );
    // A node leaves and comes back, as the service controller's node sync does it.
    if hosts.len() > 1 {
        report.record(
            format!(
                "update-load-balancer to {} of {} nodes works",
                hosts.len() - 1,
                hosts.len()
            ),
            check(
                lb.update_load_balancer(cluster, &svc, &hosts[1..]).await,
                |_| None,
            ),
        );
    }
    report.record(
        format!("update-load-balancer to all {} nodes works", hosts.len()),
        check(lb.update_load_balancer(cluster, &svc, hosts).await, |_| {
            None
        }),
    );
    report.record(
        "get-load-balancer after the updates gives the same status",
        check(lb.get_load_balancer(cluster, &svc).await, as_ensured),
    );
    report.record(
        "ensure-load-balancer-deleted succeeds",
        check(lb.ensure_load_balancer_deleted(cluster, &svc).await, |_| {
            None
        }),
    );
    // One delete removes what both ensures made: the second did not make another.
    report.record(
        "get-load-balancer then says none (ensure made one load balancer)",
        check(lb.get_load_balancer(cluster, &svc).await, |found| {
            found.as_ref().map(|s| format!("still {s:?}"))
        }),
    );
    report.record(
        "ensure-load-balancer-deleted succeeds again",
        check(lb.ensure_load_balancer_deleted(cluster, &svc).await, |_| {
            None
        }),
    );
    // The service controller's node sync can reach a Service whose load balancer was
    // just deleted: the update may fail (occm's does) but must make nothing.
    let _ = lb.update_load_balancer(cluster, &svc, hosts).await;
    report.record(
        "update-load-balancer without a load balancer creates none",
        match lb.get_load_balancer(cluster, &svc).await {
            Ok(None) => Outcome::Pass,
            Ok(Some(status)) => {
                let _ = lb.ensure_load_balancer_deleted(cluster, &svc).await;
                Outcome::Fail(format!("created one: {status:?}"))
            }
            Err(err) => Outcome::Fail(describe(&err)),
        },
    );
    Ok(())
}

pub(super) async fn route_checks(
    provider: &Provider,
    request: &Conformance,
    cidr: &str,
    target: &wit::Node,
    report: &mut Report,
) {
    let routes = provider.routes().expect("checked by the caller");
    let cluster = &request.cluster_name;
    let route = wit::Route {
        name: String::new(),
        target_node: target.metadata.name.clone(),
        target_node_addresses: target.addresses.clone(),
        destination_cidr: cidr.to_owned(),
        blackhole: false,
        enable_node_addresses: true,
        target_node_provider_id: target.provider_id.clone(),
    };
    // A route named by its next hop only (as occm lists them) is the target's when the
    // target holds that address: the controller manager resolves it so.
    let targets = |r: &wit::Route| {
        r.target_node == route.target_node
            || (r.target_node.is_empty()
                && r.target_node_addresses
                    .iter()
                    .any(|hop| target.addresses.iter().any(|a| a.address == hop.address)))
    };
    let listed = |list: &[wit::Route]| -> Option<wit::Route> {
        list.iter()
            .find(|r| r.destination_cidr == cidr && targets(r))
            .cloned()
    };
    report.record(
        format!("create-route({cidr} → {})", route.target_node),
        check(
            routes
                .create_route(cluster, "wasm-ccm-conformance", &route)
                .await,
            |_| None,
        ),
    );
    let created = routes.list_routes(cluster).await;
    let found = created.as_ref().ok().and_then(|l| listed(l));
    report.record(
        "list-routes has it",
        check(created, |l| {
            listed(l).is_none().then(|| "not listed".into())
        }),
    );
    let to_delete = found.unwrap_or(route.clone());
    report.record(
        "delete-route succeeds",
        check(routes.delete_route(cluster, &to_delete).await, |_| None),
    );
    report.record(
        "delete-route succeeds again",
        check(routes.delete_route(cluster, &to_delete).await, |_| None),
    );
    report.record(
        "list-routes no longer has it",
        check(routes.list_routes(cluster).await, |l| {
            listed(l).map(|r| format!("still listed: {r:?}"))
        }),
    );
}
