//! `load-balancer`: one cloud load balancer per Service, named like upstream's
//! default (`a` + UID without dashes, 32 characters at most).
//!
//! A Service annotated `simcloud.example/load-balancer-implementation: external` is
//! served by another controller: `ensure-`, `update-load-balancer` and
//! `ensure-load-balancer-deleted` answer `implemented-elsewhere` (`get` still reports a
//! load balancer of that name the other controller made), and the host leaves it
//! alone, as upstream does.

use std::collections::HashMap;

use wasm_ccm_guest::types::{
    CloudError, IpMode, LoadBalancerIngress, LoadBalancerStatus, Node, Protocol, Service,
};
use wasm_ccm_guest::{LoadBalancer, default_load_balancer_name as default_name};

use crate::cloud::{LbPort, LoadBalancerSpec};
use crate::{SimCloud, instance_id_from_provider_id};

/// The annotation handing a Service's load balancer to another controller.
pub const ANNOTATION_IMPLEMENTATION: &str = "simcloud.example/load-balancer-implementation";

/// `implemented-elsewhere` for a Service another controller serves (the annotation).
fn ours(service: &Service) -> Result<(), CloudError> {
    let elsewhere = service
        .metadata
        .annotations
        .iter()
        .any(|(k, v)| k == ANNOTATION_IMPLEMENTATION && v == "external");
    if elsewhere {
        return Err(CloudError::ImplementedElsewhere);
    }
    Ok(())
}

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

/// Instance IDs for nodes: from provider IDs, else by name. One list call: a node
/// whose instance is gone (deleted or terminated) is left out and logged, so one
/// vanished instance does not make every load balancer fail.
fn backends(state: &SimCloud, nodes: &[Node]) -> Result<Vec<String>, CloudError> {
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let alive: HashMap<String, String> = state
        .cloud
        .instances()?
        .into_iter()
        .filter(|i| !i.is_terminated())
        .map(|i| (i.id, i.name))
        .collect();
    let mut ids = Vec::with_capacity(nodes.len());
    for node in nodes {
        let id = match node.provider_id.as_deref().filter(|p| !p.is_empty()) {
            Some(pid) => Some(instance_id_from_provider_id(pid)?.to_owned()),
            None => alive
                .iter()
                .find(|(_, name)| **name == node.metadata.name)
                .map(|(id, _)| id.clone()),
        };
        match id.filter(|id| alive.contains_key(id)) {
            Some(id) => ids.push(id),
            None => wasm_ccm_guest::log::warn(
                "node has no running cloud instance; leaving it out of the load balancer",
                &[("node", &node.metadata.name)],
            ),
        }
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}

fn spec(
    state: &SimCloud,
    service: &Service,
    nodes: &[Node],
) -> Result<LoadBalancerSpec, CloudError> {
    if service.ports.is_empty() {
        return Err(CloudError::Other(format!(
            "service {}/{} has no ports",
            service.metadata.namespace, service.metadata.name
        )));
    }
    let mut ports = Vec::with_capacity(service.ports.len());
    for p in &service.ports {
        let port = u16::try_from(p.port)
            .map_err(|_| CloudError::Other(format!("port {} out of range", p.port)))?;
        let node_port = u16::try_from(p.node_port)
            .map_err(|_| CloudError::Other(format!("node port {} out of range", p.node_port)))?;
        ports.push(LbPort {
            name: p.name.clone(),
            protocol: match p.protocol {
                Protocol::Tcp => "TCP",
                Protocol::Udp => "UDP",
                Protocol::Sctp => "SCTP",
            }
            .into(),
            port,
            node_port,
        });
    }
    Ok(LoadBalancerSpec {
        ports,
        backends: backends(state, nodes)?,
        source_ranges: service.load_balancer_source_ranges.clone(),
        description: format!(
            "kubernetes service {}/{}",
            service.metadata.namespace, service.metadata.name
        ),
    })
}

impl LoadBalancer for SimCloud {
    fn get_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<Option<LoadBalancerStatus>, CloudError> {
        Ok(self
            .cloud
            .load_balancer(&default_name(&service))?
            .map(|lb| status(lb.address)))
    }

    fn ensure_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<LoadBalancerStatus, CloudError> {
        ours(&service)?;
        let spec = spec(self, &service, &nodes)?;
        let lb = self
            .cloud
            .put_load_balancer(&default_name(&service), &spec)?;
        Ok(status(lb.address))
    }

    fn update_load_balancer(
        &self,
        _cluster_name: String,
        service: Service,
        nodes: Vec<Node>,
    ) -> Result<(), CloudError> {
        ours(&service)?;
        self.cloud
            .put_backends(&default_name(&service), &backends(self, &nodes)?)
    }

    fn ensure_load_balancer_deleted(
        &self,
        _cluster_name: String,
        service: Service,
    ) -> Result<(), CloudError> {
        // Another controller's load balancer: found by `get`, never deleted by us.
        ours(&service)?;
        self.cloud
            .delete_load_balancer(&default_name(&service))
            .map(drop)
    }
}
