//! Trunk subports, as occm's `nodeAddresses` reads them: their IDs from the parent
//! ports' `trunk_details`, then the subports and their networks, listed by ID.

use std::collections::BTreeMap;

use serde_json::Value;
use wasm_ccm_guest::http::Request;
use wasm_ccm_guest::types::CloudError;

use super::PORTS_PER_REQUEST;
use crate::OpenStack;
use crate::api::{self, Endpoints};

/// A trunk subport as occm's `nodeAddresses` reads it (`GET /ports/{id}`, then
/// `GET /networks/{network_id}`): its network's name and its fixed IPs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subport {
    pub network: String,
    pub addresses: Vec<String>,
}

/// Subports by port ID.
pub type Subports = BTreeMap<String, Subport>;

/// The IDs of the subports of the trunks whose parents are among `ports` (Neutron's
/// `trunk_details.sub_ports`, on the ports' listing), in their order.
pub fn subport_ids<'a>(ports: impl IntoIterator<Item = &'a Value>) -> Vec<&'a str> {
    ports
        .into_iter()
        .flat_map(|p| {
            p["trunk_details"]["sub_ports"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter_map(|s| s["port_id"].as_str())
        .collect()
}

impl OpenStack {
    /// The ports whose IDs are `ids` (Neutron lists them by `id`), 100 per request.
    pub(crate) fn ports_by_id(&self, ids: &[&str]) -> Result<Vec<Value>, CloudError> {
        let mut ports = Vec::new();
        if ids.is_empty() {
            return Ok(ports);
        }
        let endpoints = Endpoints::get(&self.config)?;
        let network = api::endpoint(&endpoints.network, "network", &self.config)?;
        for chunk in ids.chunks(PORTS_PER_REQUEST) {
            let mut request = Request::get(&format!("{network}/ports"));
            for id in chunk {
                request = request.query("id", id);
            }
            ports.extend(api::list(request, "ports", "list the trunks' subports")?);
        }
        Ok(ports)
    }

    /// The subports of the trunks among `ports`, as occm's `nodeAddresses` reads each
    /// (`GET /ports/{id}`, `GET /networks/{id}`): here one listing of the subports and
    /// one of their networks per 100, and none when no port is a trunk's parent. A
    /// subport or network Neutron does not list is left out, as occm leaves out one it
    /// fails to read; a failed listing is an error (the Node keeps its addresses until
    /// the next sync rather than losing these for one).
    pub(crate) fn subports_of<'a>(
        &self,
        ports: impl IntoIterator<Item = &'a Value>,
    ) -> Result<Subports, CloudError> {
        let mut ids = subport_ids(ports);
        ids.sort_unstable();
        ids.dedup();
        let mut subports = Subports::new();
        if ids.is_empty() {
            return Ok(subports);
        }
        let listed = self.ports_by_id(&ids)?;
        let mut network_ids: Vec<&str> = listed
            .iter()
            .filter_map(|p| p["network_id"].as_str())
            .collect();
        network_ids.sort_unstable();
        network_ids.dedup();
        let endpoints = Endpoints::get(&self.config)?;
        let network = api::endpoint(&endpoints.network, "network", &self.config)?;
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for chunk in network_ids.chunks(PORTS_PER_REQUEST) {
            let mut request = Request::get(&format!("{network}/networks"));
            for id in chunk {
                request = request.query("id", id);
            }
            for n in api::list(request, "networks", "list the subports' networks")? {
                if let Some(id) = n["id"].as_str() {
                    let name = n["name"].as_str().unwrap_or_default();
                    names.insert(id.to_owned(), name.to_owned());
                }
            }
        }
        for port in &listed {
            let Some(id) = port["id"].as_str() else {
                continue;
            };
            let Some(name) = port["network_id"].as_str().and_then(|n| names.get(n)) else {
                continue;
            };
            let addresses = port["fixed_ips"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["ip_address"].as_str().map(str::to_owned))
                .collect();
            subports.insert(
                id.to_owned(),
                Subport {
                    network: name.clone(),
                    addresses,
                },
            );
        }
        Ok(subports)
    }
}
