//! The cloud's state and the operations on it, shared by the REST API, the admin API
//! and in-process callers.

use std::collections::{BTreeMap, HashMap};

use crate::model::*;

/// How many requests [`CloudState::recent`] keeps.
pub const RECENT_REQUESTS: usize = 1024;

/// Everything the simulated cloud holds.
#[derive(Debug, Default)]
pub struct CloudState {
    pub instances: BTreeMap<String, Instance>,
    pub load_balancers: BTreeMap<String, LoadBalancer>,
    pub routes: BTreeMap<String, Route>,
    /// Routes blackholed by the admin API regardless of their target.
    pub forced_blackholes: std::collections::BTreeSet<String>,
    pub clusters: Vec<Cluster>,
    pub faults: Vec<Fault>,
    /// Instances the cloud wrongly says do not exist (a fault): 404 on lookup, absent
    /// from listings, though they are still there.
    pub hidden_instances: std::collections::BTreeSet<String>,
    /// Requests served, by `METHOD /route/template`.
    pub requests: HashMap<String, u64>,
    /// Requests rejected for a missing or wrong bearer token.
    pub unauthorized: u64,
    /// The last [`RECENT_REQUESTS`] requests: when each arrived, and its
    /// `METHOD /route/template`.
    pub recent: std::collections::VecDeque<(std::time::Instant, String)>,
    next_instance: u64,
    next_address: u32,
}

impl CloudState {
    /// Counts a request to `route` (`METHOD /route/template`) and keeps it among the
    /// [`RECENT_REQUESTS`] last ones.
    pub fn record_request(&mut self, route: String) {
        if self.recent.len() == RECENT_REQUESTS {
            self.recent.pop_front();
        }
        self.recent
            .push_back((std::time::Instant::now(), route.clone()));
        *self.requests.entry(route).or_default() += 1;
    }

    /// Creates an instance, filling defaults: type `sim.small`, zone `zone-a`, region
    /// `region-1`, state running, an InternalIP from 10.0.0.0/16 plus a Hostname.
    pub fn create_instance(&mut self, new: NewInstance) -> Instance {
        self.next_instance += 1;
        let id = format!("i-{:08x}", self.next_instance);
        let n = self.next_instance;
        let addresses = new.addresses.unwrap_or_else(|| {
            vec![
                Address::new(
                    "InternalIP",
                    &format!("10.0.{}.{}", (n >> 8) & 0xff, n & 0xff),
                ),
                Address::new("Hostname", &new.name),
            ]
        });
        let instance = Instance {
            id: id.clone(),
            name: new.name,
            instance_type: new.instance_type.unwrap_or_else(|| "sim.small".into()),
            zone: new.zone.unwrap_or_else(|| "zone-a".into()),
            region: new.region.unwrap_or_else(|| "region-1".into()),
            state: new.state.unwrap_or(InstanceState::Running),
            addresses,
            labels: new.labels,
        };
        self.instances.insert(id, instance.clone());
        instance
    }

    /// Applies an admin patch; `None` when there is no such instance.
    pub fn patch_instance(&mut self, id: &str, patch: InstancePatch) -> Option<Instance> {
        let instance = self.instances.get_mut(id)?;
        if let Some(state) = patch.state {
            instance.state = state;
        }
        if let Some(addresses) = patch.addresses {
            instance.addresses = addresses;
        }
        if let Some(labels) = patch.labels {
            instance.labels = labels;
        }
        if let Some(t) = patch.instance_type {
            instance.instance_type = t;
        }
        Some(instance.clone())
    }

    /// Removes an instance entirely (as if it was terminated and then purged).
    pub fn delete_instance(&mut self, id: &str) -> bool {
        self.instances.remove(id).is_some()
    }

    /// The instance `id` as the API shows it: `None` when there is none or it is
    /// hidden by a fault.
    pub fn visible_instance(&self, id: &str) -> Option<&Instance> {
        self.instances
            .get(id)
            .filter(|_| !self.hidden_instances.contains(id))
    }

    /// Instances, optionally only those with this name (hidden ones left out).
    pub fn list_instances(&self, name: Option<&str>) -> Vec<Instance> {
        self.instances
            .values()
            .filter(|i| !self.hidden_instances.contains(&i.id))
            .filter(|i| name.is_none_or(|n| i.name == n))
            .cloned()
            .collect()
    }

    /// Creates or replaces a load balancer; its address is kept across updates.
    pub fn put_load_balancer(&mut self, name: &str, spec: LoadBalancerSpec) -> LoadBalancer {
        let address = match self.load_balancers.get(name) {
            Some(existing) => existing.address.clone(),
            None => {
                self.next_address += 1;
                let n = self.next_address;
                format!("203.0.{}.{}", 113 + (n >> 8), n & 0xff)
            }
        };
        let lb = LoadBalancer {
            name: name.into(),
            address,
            ports: spec.ports,
            backends: spec.backends,
            source_ranges: spec.source_ranges,
            description: spec.description,
        };
        self.load_balancers.insert(name.into(), lb.clone());
        lb
    }

    /// Sets a route's target state, computing `blackhole`.
    pub fn route_view(&self, route: &Route) -> Route {
        let target_alive = self
            .instances
            .get(&route.target_instance)
            .is_some_and(|i| i.state != InstanceState::Terminated);
        Route {
            blackhole: !target_alive || self.forced_blackholes.contains(&route.name),
            ..route.clone()
        }
    }

    /// Routes of a cluster (all clusters when `None`).
    pub fn list_routes(&self, cluster: Option<&str>) -> Vec<Route> {
        self.routes
            .values()
            .filter(|r| cluster.is_none_or(|c| r.cluster == c))
            .map(|r| self.route_view(r))
            .collect()
    }

    /// Creates a route; an existing route of the same name is replaced.
    pub fn create_route(&mut self, new: NewRoute) -> Route {
        let route = Route {
            name: new.name.clone(),
            cluster: new.cluster,
            destination_cidr: new.destination_cidr,
            target_instance: new.target_instance,
            blackhole: false,
        };
        self.routes.insert(new.name, route.clone());
        self.route_view(&route)
    }

    /// Takes the first fault rule matching the request, consuming one use of it.
    pub fn take_fault(&mut self, method: &str, path: &str) -> Option<Fault> {
        let index = self.faults.iter().position(|f| {
            let prefix = if f.path_prefix.is_empty() {
                "/v1"
            } else {
                &f.path_prefix
            };
            path.starts_with(prefix)
                && f.method
                    .as_deref()
                    .is_none_or(|m| m.eq_ignore_ascii_case(method))
        })?;
        let fault = self.faults[index].clone();
        if let Some(count) = self.faults[index].count.as_mut() {
            *count -= 1;
            if *count == 0 {
                self.faults.remove(index);
            }
        }
        Some(fault)
    }

    /// Clears everything but counters' history.
    pub fn reset(&mut self) {
        *self = CloudState::default();
    }

    /// Total requests served under `/v1` (authorized or not).
    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_defaults_and_unique_ids() {
        let mut s = CloudState::default();
        let a = s.create_instance(NewInstance::named("a"));
        let b = s.create_instance(NewInstance::named("b"));
        assert_ne!(a.id, b.id);
        assert_eq!(a.state, InstanceState::Running);
        assert_eq!(a.addresses[1], Address::new("Hostname", "a"));
        assert_eq!(s.list_instances(Some("b")), vec![b]);
    }

    #[test]
    fn load_balancer_keeps_its_address() {
        let mut s = CloudState::default();
        let spec = LoadBalancerSpec {
            ports: vec![],
            backends: vec![],
            source_ranges: vec![],
            description: String::new(),
        };
        let first = s.put_load_balancer("lb", spec.clone());
        let second = s.put_load_balancer("lb", spec);
        assert_eq!(first.address, second.address);
    }

    #[test]
    fn routes_to_missing_instances_are_blackholes() {
        let mut s = CloudState::default();
        let i = s.create_instance(NewInstance::named("a"));
        let r = s.create_route(NewRoute {
            name: "r".into(),
            cluster: "c".into(),
            destination_cidr: "10.244.0.0/24".into(),
            target_instance: i.id.clone(),
        });
        assert!(!r.blackhole);
        s.delete_instance(&i.id);
        assert!(s.list_routes(Some("c"))[0].blackhole);
    }

    #[test]
    fn counted_faults_expire() {
        let mut s = CloudState::default();
        s.faults.push(Fault {
            status: Some(500),
            count: Some(1),
            ..Fault::default()
        });
        assert!(s.take_fault("GET", "/v1/instances").is_some());
        assert!(s.take_fault("GET", "/v1/instances").is_none());
        s.faults.push(Fault {
            path_prefix: "/v1/routes".into(),
            method: Some("post".into()),
            status: Some(429),
            ..Fault::default()
        });
        assert!(s.take_fault("GET", "/v1/routes").is_none());
        assert!(s.take_fault("POST", "/v1/routes").is_some());
        assert!(s.take_fault("POST", "/v1/routes").is_some());
    }
}
