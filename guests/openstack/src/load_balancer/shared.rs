//! occm's shared load balancers: several Services name one load balancer in
//! `loadbalancer.openstack.org/load-balancer-id`. The Service whose name the load
//! balancer has (occm's name, or the legacy `a<uid>`) owns it; the load balancer's tags
//! list every Service using it (`kube_service_<cluster>_<namespace>_<name>`), each
//! Service's listeners carry its own name as their tag, and a Service touches only its
//! own listeners. The last Service using a load balancer occm named deletes it; the
//! others remove only their listeners and their tag (occm's `ensureLoadBalancerDeleted`).

use serde_json::{Value, json};
use wasm_ccm_guest::cloud_error;
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::{CloudError, Service};

use super::listeners::{listener_is_ours, tags};
use super::settings::Wanted;
use super::{legacy_name, load_balancer_name};
use crate::OpenStack;

/// The prefix of occm's load balancer names and of the tags naming Services (occm's
/// `servicePrefix`).
pub(super) const SERVICE_PREFIX: &str = "kube_service_";

/// Whether `lb` is the Service's own: named as occm names it, or with the legacy name.
pub(super) fn owns(lb: &Value, cluster: &str, service: &Service) -> bool {
    let name = lb["name"].as_str().unwrap_or_default();
    name == load_balancer_name(cluster, service) || name == legacy_name(service)
}

/// Whether `lb`'s tags name another Service than `name`.
pub(super) fn has_other_users(lb: &Value, name: &str) -> bool {
    tags(lb)
        .iter()
        .any(|t| t.starts_with(SERVICE_PREFIX) && t != name)
}

impl OpenStack {
    /// occm's checks before a Service joins another Service's load balancer: an internal
    /// Service cannot share, and at most `max-shared-lb` Services use one.
    pub(super) fn check_share(&self, lb: &Value, wanted: &Wanted) -> Result<(), CloudError> {
        let id = lb["id"].as_str().unwrap_or_default();
        if wanted.internal {
            return Err(cloud_error::other(format!(
                "internal Service cannot share a load balancer ({id})"
            )));
        }
        let tags = tags(lb);
        let shared = tags
            .iter()
            .filter(|t| t.starts_with(SERVICE_PREFIX))
            .count();
        if !tags.contains(&wanted.name) && shared + 1 > self.config.load_balancer.max_shared_lb {
            return Err(cloud_error::other(format!(
                "load balancer {id} already shared with {shared} Services (max-shared-lb = {})",
                self.config.load_balancer.max_shared_lb
            )));
        }
        Ok(())
    }

    /// Adds the Service's name to the load balancer's tags (occm lists the Services
    /// using it there).
    pub(super) fn tag_load_balancer(&self, lb: &Value, name: &str) -> Result<(), CloudError> {
        let mut tags = tags(lb);
        if tags.iter().any(|t| t == name) {
            return Ok(());
        }
        tags.push(name.to_owned());
        self.set_tags(lb, tags)
    }

    fn set_tags(&self, lb: &Value, tags: Vec<String>) -> Result<(), CloudError> {
        let id = lb["id"].as_str().unwrap_or_default();
        self.change(
            id,
            Request::put(&format!("{}/lbaas/loadbalancers/{id}", self.octavia()?))
                .json(&json!({"loadbalancer": {"tags": tags}})),
            "tag the load balancer",
        )?;
        Ok(())
    }

    /// Whether deleting the Service deletes `lb`: no other Service uses it and occm
    /// (or the in-tree provider, for the legacy name) made it.
    pub(super) fn last_user(&self, lb: &Value, name: &str, service: &Service) -> bool {
        let others = has_other_users(lb, name);
        let lb_name = lb["name"].as_str().unwrap_or_default();
        !others && (lb_name.starts_with(SERVICE_PREFIX) || lb_name == legacy_name(service))
    }

    /// Leaves a load balancer other Services keep: deletes the Service's own listeners
    /// (tagged with `name`) with their pools, and removes `name` from its tags.
    pub(super) fn leave_load_balancer(
        &self,
        lb: &Value,
        name: &str,
        owner: bool,
    ) -> Result<(), CloudError> {
        let id = lb["id"].as_str().unwrap_or_default();
        let listeners = self.list_children("listeners", "listeners", id)?;
        let pools = self.list_children("pools", "pools", id)?;
        for listener in listeners
            .iter()
            .filter(|l| listener_is_ours(l, name, owner))
        {
            self.delete_listener(id, listener, &pools)?;
        }
        let tags: Vec<String> = tags(lb).into_iter().filter(|t| t != name).collect();
        if tags.len() != self::tags(lb).len() {
            self.set_tags(lb, tags)?;
        }
        Ok(())
    }
}
