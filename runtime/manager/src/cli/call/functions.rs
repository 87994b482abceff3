//! Every function `wasm-ccm call` knows, in one table: its interface, name and
//! arguments (how each is read), and the call with how its answer prints. The list
//! `call` shows and its dispatch are both made from the table, and a test checks that
//! the table names every function of the contract's interfaces.

use serde_json::{Value, json};
use wasm_ccm_host::provider::Provider;

use super::{
    CallError, addresses, answer, convert, metadata, node, nodes, outcome, route, routes, service,
    string, zone,
};

/// One function `call` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Function {
    /// The WIT interface.
    pub interface: &'static str,
    /// The WIT function.
    pub name: &'static str,
    /// Its arguments, as the WIT names them.
    pub args: &'static [&'static str],
}

impl Function {
    /// `INTERFACE.FUNCTION(ARGS)`, as `call` lists it.
    pub fn signature(&self) -> String {
        format!("{}.{}({})", self.interface, self.name, self.args.join(", "))
    }
}

/// The function `INTERFACE.FUNCTION` names.
pub(super) fn find(name: &str) -> Option<&'static Function> {
    FUNCTIONS
        .iter()
        .find(|f| Some((f.interface, f.name)) == name.split_once('.'))
}

/// The provider's handle of `interface`, or a usage error naming it.
fn export<T>(handle: Option<T>, interface: &str) -> Result<T, CallError> {
    handle.ok_or_else(|| CallError::Usage(format!("the provider does not export {interface}")))
}

/// A string argument, named `what` in an error.
fn text(v: &Value, what: &str) -> Result<String, CallError> {
    string(v, what)
}

/// The table. A row: `"interface"."function"(arg: reader "wit-name", ...) =>
/// |provider| answer;`, where `reader(&Value, "wit-name")` reads an argument and
/// `answer` (which may `.await`) is the JSON to print, made with `outcome` (the
/// contract's errors printed as results, traps and timeouts errors of the command).
macro_rules! functions {
    ($(
        $interface:literal . $name:literal ( $($arg:ident : $reader:ident $label:literal),* )
            => |$provider:ident| $body:expr;
    )*) => {
        /// Every function `call` knows, in the contract's order.
        pub const FUNCTIONS: &[Function] = &[
            $(Function { interface: $interface, name: $name, args: &[$($label),*] },)*
        ];

        /// Calls `function` (one of [`FUNCTIONS`]) on `provider` with `args` (as many
        /// as it takes).
        pub(super) async fn dispatch(
            provider: &Provider,
            function: &Function,
            args: &[Value],
        ) -> Result<Value, CallError> {
            match (function.interface, function.name) {
                $(($interface, $name) => {
                    #[allow(unused_mut, unused_variables)]
                    let mut given = args.iter();
                    $(let $arg = $reader(given.next().unwrap_or(&Value::Null), $label)?;)*
                    let $provider = provider;
                    $body
                })*
                (interface, name) => Err(CallError::Usage(format!(
                    "unknown function {interface}.{name}"
                ))),
            }
        }
    };
}

/// Readers named as the table names them (each takes the argument's WIT name).
fn a_node(v: &Value, _: &str) -> Result<super::wit::Node, CallError> {
    node(v)
}
fn a_nodes(v: &Value, _: &str) -> Result<Vec<super::wit::Node>, CallError> {
    nodes(v)
}
fn a_service(v: &Value, _: &str) -> Result<super::wit::Service, CallError> {
    service(v)
}
fn a_route(v: &Value, _: &str) -> Result<super::wit::Route, CallError> {
    route(v)
}

fn status(s: &super::wit::LoadBalancerStatus) -> Value {
    json!(convert::to_k8s_status(s))
}

functions! {
    "identity"."provider-name"() => |p| outcome(p.call_provider_name().await, |n| json!(n));
    "identity"."has-cluster-id"() => |p| outcome(p.call_has_cluster_id().await, |b| json!(b));
    "identity"."declined-interfaces"() => |p| outcome(p.call_declined_interfaces().await, |d| json!(d));
    "instances-v2"."instance-exists"(n: a_node "node") => |p| outcome(
        export(p.instances_v2(), "instances-v2")?.instance_exists(&n).await, |b| json!(b));
    "instances-v2"."instance-shutdown"(n: a_node "node") => |p| outcome(
        export(p.instances_v2(), "instances-v2")?.instance_shutdown(&n).await, |b| json!(b));
    "instances-v2"."instance-metadata"(n: a_node "node") => |p| outcome(
        export(p.instances_v2(), "instances-v2")?.instance_metadata(&n).await, |m| metadata(&m));
    "instances-batch"."instances-exist"(all: a_nodes "nodes") => |p| outcome(
        export(p.instances_batch(), "instances-batch")?.instances_exist(&all).await,
        |a| Value::Array(a.into_iter().map(|r| answer(r, |b| json!(b))).collect()));
    "instances-batch"."instances-shutdown"(all: a_nodes "nodes") => |p| outcome(
        export(p.instances_batch(), "instances-batch")?.instances_shutdown(&all).await,
        |a| Value::Array(a.into_iter().map(|r| answer(r, |b| json!(b))).collect()));
    "instances-batch"."instances-metadata"(all: a_nodes "nodes") => |p| outcome(
        export(p.instances_batch(), "instances-batch")?.instances_metadata(&all).await,
        |a| Value::Array(a.into_iter().map(|r| answer(r, |m| metadata(&m))).collect()));
    "instances"."node-addresses"(a: text "node-name") => |p| outcome(
        export(p.instances(), "instances")?.node_addresses(&a).await, |v| addresses(&v));
    "instances"."node-addresses-by-provider-id"(a: text "provider-id") => |p| outcome(
        export(p.instances(), "instances")?.node_addresses_by_provider_id(&a).await,
        |v| addresses(&v));
    "instances"."instance-id"(a: text "node-name") => |p| outcome(
        export(p.instances(), "instances")?.instance_id(&a).await, |s| json!(s));
    "instances"."instance-type"(a: text "node-name") => |p| outcome(
        export(p.instances(), "instances")?.instance_type(&a).await, |s| json!(s));
    "instances"."instance-type-by-provider-id"(a: text "provider-id") => |p| outcome(
        export(p.instances(), "instances")?.instance_type_by_provider_id(&a).await,
        |s| json!(s));
    "instances"."add-ssh-key-to-all-instances"(user: text "user", key: text "key-data") => |p| outcome(
        export(p.instances(), "instances")?
            .add_ssh_key_to_all_instances(&user, key.as_bytes()).await,
        |()| Value::Null);
    "instances"."current-node-name"(a: text "hostname") => |p| outcome(
        export(p.instances(), "instances")?.current_node_name(&a).await, |s| json!(s));
    "instances"."instance-exists-by-provider-id"(a: text "provider-id") => |p| outcome(
        export(p.instances(), "instances")?.instance_exists_by_provider_id(&a).await,
        |b| json!(b));
    "instances"."instance-shutdown-by-provider-id"(a: text "provider-id") => |p| outcome(
        export(p.instances(), "instances")?.instance_shutdown_by_provider_id(&a).await,
        |b| json!(b));
    "zones"."get-zone"() => |p| outcome(
        export(p.zones(), "zones")?.get_zone().await, |z| zone(&z));
    "zones"."get-zone-by-provider-id"(a: text "provider-id") => |p| outcome(
        export(p.zones(), "zones")?.get_zone_by_provider_id(&a).await, |z| zone(&z));
    "zones"."get-zone-by-node-name"(a: text "node-name") => |p| outcome(
        export(p.zones(), "zones")?.get_zone_by_node_name(&a).await, |z| zone(&z));
    "load-balancer"."get-load-balancer"(cluster: text "cluster-name", svc: a_service "service")
        => |p| outcome(
        export(p.load_balancer(), "load-balancer")?.get_load_balancer(&cluster, &svc).await,
        |s| json!(s.map(|s| convert::to_k8s_status(&s))));
    "load-balancer"."ensure-load-balancer"(
        cluster: text "cluster-name", svc: a_service "service", hosts: a_nodes "nodes")
        => |p| outcome(
        export(p.load_balancer(), "load-balancer")?
            .ensure_load_balancer(&cluster, &svc, &hosts).await,
        |s| status(&s));
    "load-balancer"."update-load-balancer"(
        cluster: text "cluster-name", svc: a_service "service", hosts: a_nodes "nodes")
        => |p| outcome(
        export(p.load_balancer(), "load-balancer")?
            .update_load_balancer(&cluster, &svc, &hosts).await,
        |()| Value::Null);
    "load-balancer"."ensure-load-balancer-deleted"(
        cluster: text "cluster-name", svc: a_service "service")
        => |p| outcome(
        export(p.load_balancer(), "load-balancer")?
            .ensure_load_balancer_deleted(&cluster, &svc).await,
        |()| Value::Null);
    "load-balancer-name"."get-load-balancer-name"(
        cluster: text "cluster-name", svc: a_service "service")
        => |p| match p.load_balancer_name() {
            Some(h) => outcome(h.get_load_balancer_name(&cluster, &svc).await, |s| json!(s)),
            // Not exported: the host uses upstream's default, as the controllers do.
            None if p.load_balancer().is_some() => Ok(json!({
                "ok": wasm_ccm_host::contract::default_load_balancer_name(&svc)
            })),
            None => Err(CallError::Usage("the provider does not export load-balancer".into())),
        };
    "routes"."list-routes"(cluster: text "cluster-name") => |p| outcome(
        export(p.routes(), "routes")?.list_routes(&cluster).await, |r| routes(&r));
    "routes"."create-route"(
        cluster: text "cluster-name", hint: text "name-hint", r: a_route "route")
        => |p| outcome(
        export(p.routes(), "routes")?.create_route(&cluster, &hint, &r).await, |()| Value::Null);
    "routes"."delete-route"(cluster: text "cluster-name", r: a_route "route") => |p| outcome(
        export(p.routes(), "routes")?.delete_route(&cluster, &r).await, |()| Value::Null);
    "clusters"."list-clusters"() => |p| outcome(
        export(p.clusters(), "clusters")?.list_clusters().await, |c| json!(c));
    "clusters"."master"(cluster: text "cluster-name") => |p| outcome(
        export(p.clusters(), "clusters")?.master(&cluster).await, |s| json!(s));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function of every interface the contract's `provider` world exports, with
    /// its arguments, is a row of the table, and every row is one.
    #[test]
    fn the_table_is_the_contract() {
        let wit = include_str!("../../../../../guests/sdk/wit/provider.wit");
        // The interfaces `world provider` exports.
        let world = wit
            .split("world provider {")
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .expect("world provider");
        let exported: Vec<&str> = world
            .lines()
            .filter_map(|l| l.trim().strip_prefix("export "))
            .map(|l| l.trim_end_matches(';'))
            .collect();
        assert!(exported.contains(&"instances-v2"), "{exported:?}");
        // Their functions: `name: func(args)` at the interface's own level (records and
        // variants inside it open blocks of their own).
        let mut contract = Vec::new();
        let (mut interface, mut depth) = (None::<String>, 0usize);
        for line in wit.lines().map(str::trim) {
            if depth == 0 {
                if let Some(name) = line.strip_prefix("interface ") {
                    interface = Some(name.trim_end_matches(" {").to_owned());
                }
            } else if depth == 1
                && let (Some(iface), Some((name, rest))) = (&interface, line.split_once(": func("))
                && exported.contains(&iface.as_str())
            {
                let params = rest.split(')').next().unwrap_or_default();
                let args: Vec<String> = params
                    .split(", ")
                    .filter(|p| !p.is_empty())
                    .map(|p| p.split(':').next().unwrap_or_default().trim().to_owned())
                    .collect();
                contract.push(format!("{iface}.{name}({})", args.join(", ")));
            }
            let line = line.split("//").next().unwrap_or_default();
            depth += line.matches('{').count();
            depth = depth.saturating_sub(line.matches('}').count());
            if depth == 0 {
                interface = None;
            }
        }
        // `identity.initialize` is the host's to call, at load.
        contract.retain(|f| f != "identity.initialize(cloud-config)");
        let table: Vec<String> = FUNCTIONS.iter().map(Function::signature).collect();
        let (mut contract_sorted, mut table_sorted) = (contract.clone(), table.clone());
        contract_sorted.sort();
        table_sorted.sort();
        assert_eq!(table_sorted, contract_sorted);
        assert!(contract.len() > 25, "{contract:?}");
    }
}
