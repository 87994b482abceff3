//! `load-balancer` with Huawei Cloud's shared ELB (ELB v2), as
//! kubernetes-sigs/cloud-provider-huaweicloud's `SharedLoadBalancer`
//! (`sharedloadbalancer.go`) serves Services annotated `kubernetes.io/elb.class:
//! shared`: one ELB per Service named `k8s_service_<cluster>_<namespace>_<name>` (or an
//! existing one, `kubernetes.io/elb.id`, adopted and never deleted), one listener per
//! Service port (`<name>_<protocol>_<port>`), a pool per listener (`sg_<listener>`)
//! with the Nodes at their node port as members, a health monitor per pool unless
//! turned off, and an EIP on the VIP port when asked ([`eip`]). Every annotation is
//! read up front ([`annotations`]).
//!
//! Other classes upstream knows (`dedicated`, `elasticity`, `dnat`) are refused by
//! name with a Warning; a Service without a known class gets upstream's error.
//!
//! The ELB is busy (`PENDING_*`) for a moment after each change; each call waits for
//! it while its deadline allows and otherwise answers `retry-after`, the next call
//! resuming where this one stopped ([`wait`]).

pub(crate) mod annotations;
mod cloud;
mod eip;
mod listeners;
mod names;
mod pools;
#[cfg(test)]
mod tests;
mod wait;

use serde_json::{Value, json};
use wasm_ccm_guest::types::{
    CloudError, IpMode, LoadBalancerIngress, LoadBalancerStatus, Node, Service,
};
use wasm_ccm_guest::{cloud_error, events, log};

use crate::HuaweiCloud;
use annotations::{Class, Defaults, Settings};
use cloud::{Cloud, ELB, Endpoint, VPC, encode, text};

/// An error about `service`, naming it.
fn fail_for(service: &Service, why: &str) -> CloudError {
    cloud_error::other(format!(
        "service {}/{}: {why}",
        service.metadata.namespace, service.metadata.name
    ))
}

/// The Service's ELB name without the configured `business-name` (see [`name_for`]).
pub fn name(cluster: &str, service: &Service) -> String {
    names::load_balancer(cluster, "", service)
}

/// Upstream's `GetLoadBalancerName`: with the configured `business-name` in place of
/// the cluster name when there is one.
pub fn name_for(provider: &HuaweiCloud, cluster: &str, service: &Service) -> String {
    let defaults = Defaults::from_config(&provider.config);
    names::load_balancer(cluster, &defaults.business_name, service)
}

/// Upstream's `isSupportedSvc`: a Service of another `spec.loadBalancerClass` than
/// `huaweicloud.com/elb`, or of none when the config names a class, is another
/// controller's. (Upstream also refuses a Service no longer of type LoadBalancer,
/// which leaves its ELB behind; here its cleanup is served.)
fn served(provider: &HuaweiCloud, service: &Service) -> Result<Defaults, CloudError> {
    let defaults = Defaults::from_config(&provider.config);
    let ours = match service.load_balancer_class.as_deref() {
        Some(class) => class == annotations::LOAD_BALANCER_CLASS,
        None => defaults.load_balancer_class.is_empty(),
    };
    if ours {
        Ok(defaults)
    } else {
        Err(CloudError::ImplementedElsewhere)
    }
}

/// Upstream's `getLoadBalancerVersion` for an ensure or an update: `shared` is served;
/// another class upstream serves is refused by name, anything else gets upstream's
/// error; both with a Warning on the Service.
fn shared_only(service: &Service) -> Result<(), CloudError> {
    let (reason, message) = match annotations::class(service) {
        Class::Shared => return Ok(()),
        Class::Refused(value, what) => (
            "UnsupportedELBClass",
            format!(
                "{} \"{value}\" ({what}) is not served yet: this provider serves only \"shared\"",
                annotations::CLASS
            ),
        ),
        // Upstream's words, its typo included.
        Class::Unknown(value) => (
            "UnknownELBClass",
            format!("unknow load balancer elb.class: {value}"),
        ),
    };
    let _ = events::warning(reason, &message, None);
    Err(fail_for(service, &message))
}

/// Upstream's `ensureLoadBalancerValidation` (its check of `spec.selector` is left out:
/// the contract's Service has no selector).
fn validate(service: &Service, nodes: &[Node]) -> Result<(), CloudError> {
    if nodes.is_empty() {
        return Err(cloud_error::other(format!(
            "there are no available nodes for LoadBalancer service {}/{}",
            service.metadata.namespace, service.metadata.name
        )));
    }
    if service.ports.is_empty() {
        return Err(fail_for(
            service,
            "the loadbalancer service does not configure Spec.Ports",
        ));
    }
    Ok(())
}

/// Upstream's `getLoadBalancerInstance`: the ELB `elb_id` names, else the one of
/// `name`; `None` when there is none. Two of the name are upstream's error.
fn find(cloud: &Cloud, name: &str, elb_id: Option<&str>) -> Result<Option<Value>, CloudError> {
    if let Some(id) = elb_id {
        return wait::read(cloud, id);
    }
    let found = cloud.list(
        Endpoint::Elb,
        &format!("{ELB}/loadbalancers?name={}", encode(name)),
        "loadbalancers",
        "find the ELB",
    )?;
    let mut named: Vec<Value> = found.into_iter().filter(|lb| lb["name"] == name).collect();
    match named.len() {
        0 => Ok(None),
        1 => Ok(named.pop()),
        n => Err(cloud_error::other(format!(
            "error, found {n} ELBs named {name}, make sure there is only one"
        ))),
    }
}

/// The ELB's subnet as the ELB v2 API wants it (`vip_subnet_id` is the subnet's
/// `neutron_subnet_id`): the VPC subnet `id` names (`GET /v1/{project_id}/subnets/{id}`),
/// else `id` itself, as upstream passes it (already a Neutron subnet ID).
fn neutron_subnet(cloud: &Cloud, id: &str) -> Result<String, CloudError> {
    let found = cloud.find(
        Endpoint::Vpc,
        &format!("{VPC}/subnets/{}", encode(id)),
        "get the ELB's subnet",
    )?;
    let Some(body) = found else {
        return Ok(id.to_owned());
    };
    match text(&body["subnet"], "neutron_subnet_id") {
        "" => Err(cloud_error::other(format!(
            "subnet {id} has no IPv4 subnet (neutron_subnet_id) for an ELB"
        ))),
        neutron => Ok(neutron.to_owned()),
    }
}

/// Upstream's `createLoadbalancer` (provider `vlb`, its description); the wait for
/// `ACTIVE` follows in the caller.
fn create(
    cloud: &Cloud,
    cluster: &str,
    name: &str,
    service: &Service,
    settings: &Settings,
) -> Result<Value, CloudError> {
    let Some(subnet) = &settings.subnet_id else {
        return Err(fail_for(
            service,
            "missing subnet-id, can not to read subnet-id from service or cloud-config",
        ));
    };
    let body = json!({"loadbalancer": {
        "name": name,
        "vip_subnet_id": neutron_subnet(cloud, subnet)?,
        "provider": "vlb",
        "description": names::description(cluster, service),
    }});
    let created = cloud.post(
        Endpoint::Elb,
        &format!("{ELB}/loadbalancers"),
        &body,
        "create the ELB",
    )?;
    let lb = created["loadbalancer"].clone();
    log::info("created an ELB", &[("name", name), ("id", text(&lb, "id"))]);
    Ok(lb)
}

/// `lb` if `ACTIVE`, else once it is ([`wait::active`]).
fn settled(cloud: &Cloud, lb: Value) -> Result<Value, CloudError> {
    match text(&lb, "provisioning_status") {
        "ACTIVE" => Ok(lb),
        _ => wait::active(cloud, text(&lb, "id")),
    }
}

/// The Service's status: the address alone, as upstream answers it.
fn status(address: String) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: vec![LoadBalancerIngress {
            ip: Some(address),
            hostname: None,
            ip_mode: Some(IpMode::Vip),
            ports: Vec::new(),
        }],
    }
}

/// The address of `lb`: the bound EIP's, else the VIP.
fn service_address(cloud: &Cloud, lb: &Value) -> Result<String, CloudError> {
    Ok(match eip::bound(cloud, lb)?.into_iter().next() {
        Some(eip) => eip.address,
        None => text(lb, "vip_address").to_owned(),
    })
}

/// The ELB of a Service for get and delete: a `shared` Service's as upstream finds it;
/// for any other class only an ELB of this provider's name (left from a time the
/// Service was `shared`), so that the Service's cleanup never fails on its class.
fn find_for_cleanup(
    cloud: &Cloud,
    name: &str,
    service: &Service,
) -> Result<Option<Value>, CloudError> {
    let elb_id = match annotations::class(service) {
        Class::Shared => annotations::annotation(service, annotations::ID),
        _ => None,
    };
    find(cloud, name, elb_id)
}

/// Upstream's `GetLoadBalancer`.
pub fn get(
    provider: &HuaweiCloud,
    cluster: &str,
    service: &Service,
) -> Result<Option<LoadBalancerStatus>, CloudError> {
    served(provider, service)?;
    let cloud = Cloud::new(provider);
    let name = name_for(provider, cluster, service);
    let Some(lb) = find_for_cleanup(&cloud, &name, service)? else {
        return Ok(None);
    };
    if text(&lb, "vip_port_id").is_empty() {
        return Err(cloud_error::other(format!(
            "The ELB {name} VipPortId is empty, and the instance is unavailable"
        )));
    }
    Ok(Some(status(service_address(&cloud, &lb)?)))
}

/// Upstream's `EnsureLoadBalancer`.
pub fn ensure(
    provider: &HuaweiCloud,
    cluster: &str,
    service: &Service,
    nodes: &[Node],
) -> Result<LoadBalancerStatus, CloudError> {
    let defaults = served(provider, service)?;
    shared_only(service)?;
    validate(service, nodes)?;
    let settings = annotations::parse(service, &defaults)?;
    let cloud = Cloud::new(provider);
    let name = name_for(provider, cluster, service);
    let elb_id = settings.elb_id.as_deref();
    let lb = match (find(&cloud, &name, elb_id)?, elb_id) {
        (Some(lb), _) => lb,
        (None, Some(id)) => {
            return Err(fail_for(
                service,
                &format!("ELB {id} named by {} does not exist", annotations::ID),
            ));
        }
        (None, None) => create(&cloud, cluster, &name, service, &settings)?,
    };
    let lb = settled(&cloud, lb)?;
    let adopted = elb_id.is_some();
    listeners::reconcile(&cloud, &lb, service, &settings, nodes, !adopted)?;
    let public = if adopted {
        ignored_with_adopted(&settings);
        None
    } else {
        eip::ensure(&cloud, &lb, service, &settings)?
    };
    let address = match public {
        Some(address) => address,
        None => service_address(&cloud, &lb)?,
    };
    Ok(status(address))
}

/// Upstream's usage guide: `kubernetes.io/elb.eip-id` "has no effect when using an
/// existing ELB service" (its code binds it all the same, and creates an EIP for
/// `eip-auto-create-option` that nothing releases); here neither changes an adopted
/// ELB, and a Warning says so.
fn ignored_with_adopted(settings: &Settings) {
    let ignored: Vec<&str> = [
        (settings.eip_id.is_some(), annotations::EIP_ID),
        (
            settings.eip_auto_create.is_some(),
            annotations::EIP_AUTO_CREATE,
        ),
    ]
    .into_iter()
    .filter_map(|(set, key)| set.then_some(key))
    .collect();
    if !ignored.is_empty() {
        let _ = events::warning(
            "ELBAnnotationIgnored",
            &format!(
                "{} ignored: the ELB named by {} is not this provider's; its EIP is left as it is",
                ignored.join(" and "),
                annotations::ID
            ),
            None,
        );
    }
}

/// Upstream's `UpdateLoadBalancer`: members and health monitors of the existing
/// listeners (an ELB or a listener missing is upstream's error). Without Nodes the
/// pools are emptied (upstream would index the first Node and panic).
pub fn update(
    provider: &HuaweiCloud,
    cluster: &str,
    service: &Service,
    nodes: &[Node],
) -> Result<(), CloudError> {
    let defaults = served(provider, service)?;
    shared_only(service)?;
    let settings = annotations::parse(service, &defaults)?;
    let cloud = Cloud::new(provider);
    let name = name_for(provider, cluster, service);
    let Some(lb) = find(&cloud, &name, settings.elb_id.as_deref())? else {
        return Err(fail_for(service, &format!("not found ELB instance {name}")));
    };
    let lb = settled(&cloud, lb)?;
    listeners::update_members(&cloud, &lb, service, &settings, nodes)
}

/// Upstream's `EnsureLoadBalancerDeleted`: an adopted ELB loses only the Service's
/// listeners; an ELB made here loses its listeners, then its EIP ([`eip::release`]),
/// then goes. Gone already is done.
pub fn delete(provider: &HuaweiCloud, cluster: &str, service: &Service) -> Result<(), CloudError> {
    let defaults = served(provider, service)?;
    let settings = annotations::for_deletion(service, &defaults)?;
    let cloud = Cloud::new(provider);
    let name = name_for(provider, cluster, service);
    let Some(lb) = find_for_cleanup(&cloud, &name, service)? else {
        return Ok(());
    };
    let id = text(&lb, "id").to_owned();
    // A busy one once it is not; one in ERROR is not waited for (its listeners' deletion
    // may still fail on it, as upstream's does).
    let lb = match text(&lb, "provisioning_status") {
        "ACTIVE" | "ERROR" => lb,
        _ => wait::active(&cloud, &id)?,
    };
    let adopted = matches!(annotations::class(service), Class::Shared) && settings.elb_id.is_some();
    if adopted {
        return listeners::delete_matching(&cloud, &id, service, &settings);
    }
    listeners::delete_all(&cloud, &id)?;
    eip::release(&cloud, &lb, &settings)?;
    cloud.delete(
        Endpoint::Elb,
        &format!("{ELB}/loadbalancers/{}", encode(&id)),
        "delete the ELB",
    )?;
    log::info("deleted an ELB", &[("name", &name), ("id", &id)]);
    Ok(())
}
