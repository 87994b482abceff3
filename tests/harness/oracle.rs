//! Comparing wasm-ccm with a cloud's own controller manager run on the same scenarios
//! (tests/aws_oracle/, tests/openstack_oracle/): what each side left flattened to
//! `path = value` lines with the IDs that differ between two runs replaced by what they
//! stand for ([`Names`]), the cluster's side of it ([`cluster`]), and the comparison
//! table that fails on a difference the provider's README does not list
//! ([`Comparison`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

/// `path = value`, ordered.
pub type Flat = BTreeMap<String, String>;

/// The IDs of one run and what each stands for, the longest first (an ID inside a
/// longer one is replaced after it).
#[derive(Debug, Default)]
pub struct Names(Vec<(String, String)>);

impl Names {
    pub fn new() -> Self {
        Self::default()
    }

    /// `id` stands for `meaning` (an empty ID is ignored).
    pub fn add(&mut self, id: impl Into<String>, meaning: impl Into<String>) {
        let id = id.into();
        if !id.is_empty() {
            let at = self.0.partition_point(|(known, _)| known.len() >= id.len());
            self.0.insert(at, (id, meaning.into()));
        }
    }

    /// `text` with every ID that stands alone (no letter or digit next to it: an
    /// address is not replaced inside a longer one) replaced, the longest IDs first.
    pub fn apply(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (id, meaning) in &self.0 {
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(at) = rest.find(id.as_str()) {
                let end = at + id.len();
                let alone = !rest[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_ascii_alphanumeric())
                    && !rest[end..]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphanumeric());
                out.push_str(&rest[..at]);
                out.push_str(if alone { meaning } else { id });
                rest = &rest[end..];
            }
            out.push_str(rest);
            text = out;
        }
        text
    }
}

/// Flattens `value` under `prefix` into `out`, IDs replaced; a list is ordered by its
/// elements' text (IDs replaced), so two sides listing alike in another order are equal.
pub fn flatten_json(value: &serde_json::Value, prefix: &str, names: &Names, out: &mut Flat) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                flatten_json(v, &format!("{prefix}.{k}"), names, out);
            }
        }
        serde_json::Value::Array(items) => {
            let mut items: Vec<(String, &serde_json::Value)> = items
                .iter()
                .map(|v| (names.apply(&v.to_string()), v))
                .collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            for (i, (_, v)) in items.into_iter().enumerate() {
                flatten_json(v, &format!("{prefix}[{i}]"), names, out);
            }
        }
        serde_json::Value::Null => {}
        serde_json::Value::String(s) => {
            out.insert(prefix.to_owned(), names.apply(s));
        }
        other => {
            out.insert(prefix.to_owned(), names.apply(&other.to_string()));
        }
    }
}

/// The cluster: each Service's load balancer status, annotations and finalizers, the types and
/// reasons of the events about Services and Nodes (a controller manager's, not the API
/// server's own: its repair loops' about Services, or its ServiceCIDR controller's
/// `KubernetesDefaultServiceCIDRInconsistent`, which one server may record while it starts
/// and the other not), each Node's provider ID, addresses, labels and taints.
pub async fn cluster(client: &kube::Client, names: &Names) -> Flat {
    let mut out = Flat::new();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    for s in services.list(&ListParams::default()).await.unwrap().items {
        let name = s.metadata.name.clone().unwrap_or_default();
        let value = serde_json::json!({
            "status": s.status.as_ref().and_then(|s| s.load_balancer.clone()),
            "annotations": s.metadata.annotations,
            "finalizers": s.metadata.finalizers,
        });
        flatten_json(
            &value,
            &names.apply(&format!("svc/{name}")),
            names,
            &mut out,
        );
    }
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    // One key per object and event type and reason: `events/service/web/Normal
    // EnsuredLoadBalancer`.
    let mut reasons: BTreeSet<String> = BTreeSet::new();
    for e in events.list(&ListParams::default()).await.unwrap().items {
        let Some(regarding) = e.regarding.as_ref() else {
            continue;
        };
        if !matches!(regarding.kind.as_deref(), Some("Service" | "Node")) {
            continue;
        }
        let reporter = e
            .reporting_controller
            .clone()
            .or_else(|| {
                e.deprecated_source
                    .as_ref()
                    .and_then(|s| s.component.clone())
            })
            .unwrap_or_default();
        if reporter.ends_with("repair-controller") {
            continue;
        }
        let object = format!(
            "{}/{}",
            regarding.kind.clone().unwrap_or_default().to_lowercase(),
            regarding.name.clone().unwrap_or_default()
        );
        reasons.insert(format!(
            "events/{object}/{} {}",
            e.type_.unwrap_or_default(),
            e.reason.unwrap_or_default()
        ));
    }
    for key in reasons {
        out.insert(names.apply(&key), "recorded".into());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for n in nodes.list(&ListParams::default()).await.unwrap().items {
        let name = n.metadata.name.clone().unwrap_or_default();
        let value = serde_json::json!({
            "providerID": n.spec.as_ref().and_then(|s| s.provider_id.clone()),
            "taints": n.spec.as_ref().and_then(|s| s.taints.clone()).map(|t| {
                t.into_iter().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>()
            }),
            "addresses": n.status.as_ref().and_then(|s| s.addresses.clone()),
            "labels": n.metadata.labels,
        });
        flatten_json(
            &value,
            &names.apply(&format!("node/{name}")),
            names,
            &mut out,
        );
    }
    out
}

/// A controller manager under comparison, and its log.
pub struct Running {
    side: String,
    child: std::sync::Mutex<tokio::process::Child>,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Running {
    /// `side` names it in failures; `spawned` is what [`crate::spawn_logged`] answers.
    pub fn new(
        side: impl std::fmt::Debug,
        spawned: (
            tokio::process::Child,
            std::sync::Arc<std::sync::Mutex<String>>,
        ),
    ) -> Self {
        Self {
            side: format!("{side:?}"),
            child: std::sync::Mutex::new(spawned.0),
            log: spawned.1,
        }
    }

    /// Panics with its log when it has exited: nothing converges without it.
    pub fn alive(&self) {
        if let Ok(Some(status)) = self.child.lock().unwrap().try_wait() {
            panic!("{} exited ({status}):\n{}", self.side, self.log());
        }
    }

    /// Stops it (no leader election: the new one starts at once) and runs `spawned`
    /// in its place.
    pub async fn restart(
        &mut self,
        spawned: (
            tokio::process::Child,
            std::sync::Arc<std::sync::Mutex<String>>,
        ),
    ) {
        let child = self.child.get_mut().unwrap();
        let _ = child.kill().await;
        *child = spawned.0;
        self.log = spawned.1;
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

/// Snapshots with `take` until two in a row, `interval` apart, are equal (the side has
/// converged); that one. Panics with what kept changing after `timeout`.
pub async fn steady(
    running: &Running,
    timeout: std::time::Duration,
    interval: std::time::Duration,
    mut take: impl AsyncFnMut() -> Flat,
) -> Flat {
    let deadline = std::time::Instant::now() + timeout;
    let mut last = take().await;
    loop {
        tokio::time::sleep(interval).await;
        running.alive();
        let now = take().await;
        if now == last {
            return now;
        }
        if std::time::Instant::now() > deadline {
            let changed: Vec<&String> = now
                .iter()
                .filter(|(k, v)| last.get(*k) != Some(v))
                .map(|(k, _)| k)
                .collect();
            panic!(
                "{}: the cloud kept changing for {timeout:?}: {changed:?}\n{}",
                running.side,
                running.log()
            );
        }
        last = now;
    }
}

/// The group of the first `(key prefix, group)` whose prefix `key` starts with, else
/// `other`: where a key no scenario owns goes in the table.
pub fn group_of(key: &str, groups: &[(&str, &str)]) -> String {
    groups
        .iter()
        .find(|(prefix, _)| key.starts_with(prefix))
        .map_or("other", |(_, group)| group)
        .to_owned()
}

/// One listed difference: a scenario (`*`: any) and a key pattern (`*` matches any run
/// of characters).
#[derive(Debug)]
pub struct Listed {
    scenario: String,
    pattern: String,
}

impl Listed {
    pub fn matches(&self, scenario: &str, key: &str) -> bool {
        (self.scenario == "*" || self.scenario == scenario) && glob(&self.pattern, key)
    }
}

/// The marker before a README's table of listed differences.
const MARKER: &str = "<!-- oracle differences";

/// The rows of the table after `<!-- oracle differences` in `readme`: `| scenario |
/// key pattern | why |`, code-quoted.
pub fn listed(readme: &str) -> Vec<Listed> {
    let start = readme
        .find(MARKER)
        .expect("the README has the oracle differences table");
    readme[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert!(cells.len() >= 4, "a row of the oracle table: {row}");
            let unquote = |c: &str| c.trim_matches('`').to_owned();
            Listed {
                scenario: unquote(cells[1]),
                pattern: unquote(cells[2]),
            }
        })
        .collect()
}

/// An event key of a failure: `events/<object>/Warning <Reason>Failed`.
fn failure_event(key: &str) -> bool {
    key.starts_with("events/") && key.contains("/Warning ") && key.ends_with("Failed")
}

/// `*` matches any run of characters; everything else itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if text.len() < first.len() + last.len() || !text.starts_with(first) || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// The comparison of two runs, phase by phase.
pub struct Comparison {
    /// Every row: phase, scenario, `equal` or `listed:`/`UNLISTED:` and the key.
    pub table: String,
    /// The differences no row of the README lists.
    pub unlisted: Vec<String>,
}

impl Comparison {
    /// Compares `upstream` and `ours` (one snapshot per phase); each differing key is
    /// given to a scenario by `scenario_of`; `groups` (scenarios and other groups such
    /// as `nodes`) each get a row even when equal.
    ///
    /// A failure event (`Warning …Failed`) only upstream recorded is shown as `upstream
    /// retried`, not as a difference: upstream's controllers race each other under load
    /// (a Service's sync and the node sync updating one load balancer) and retry, and
    /// the state each phase compares, once converged, shows whether the retry got where
    /// wasm-ccm did. A failure only wasm-ccm recorded is always a difference.
    pub fn new(
        phases: &[&str],
        upstream: &[Flat],
        ours: &[Flat],
        groups: &[String],
        scenario_of: impl Fn(&str) -> String,
        listed: &[Listed],
    ) -> Self {
        let mut unlisted = Vec::new();
        let mut table = String::from("phase    | scenario | result\n");
        for (phase, (theirs, mine)) in phases.iter().zip(upstream.iter().zip(ours.iter())) {
            let compared: BTreeSet<&String> = theirs.keys().chain(mine.keys()).collect();
            table.push_str(&format!(
                "{phase:8} | {} fields compared |\n",
                compared.len()
            ));
            let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for group in groups {
                rows.entry(group.clone()).or_default();
            }
            for key in compared {
                let (a, b) = (theirs.get(key), mine.get(key));
                if a == b {
                    continue;
                }
                let scenario = scenario_of(key);
                let known = listed.iter().any(|d| d.matches(&scenario, key));
                let retried = b.is_none() && failure_event(key);
                let mark = match (known, retried) {
                    (true, _) => "listed",
                    (false, true) => "upstream retried",
                    (false, false) => "UNLISTED",
                };
                rows.entry(scenario.clone())
                    .or_default()
                    .push(format!("{mark}: {key}: upstream {a:?}, wasm-ccm {b:?}"));
                if !known && !retried {
                    unlisted.push(format!("{phase} {scenario} {key}"));
                }
            }
            for (scenario, diffs) in rows {
                if diffs.is_empty() {
                    table.push_str(&format!("{phase:8} | {scenario} | equal\n"));
                }
                for d in diffs {
                    table.push_str(&format!("{phase:8} | {scenario} | {d}\n"));
                }
            }
        }
        Self { table, unlisted }
    }

    /// Prints the table; panics listing the unlisted differences.
    pub fn check(&self, readme: &str) {
        println!("{}", self.table);
        assert!(
            self.unlisted.is_empty(),
            "differences from upstream not listed in {readme}:\n{}\n\n{}",
            self.unlisted.join("\n"),
            self.table
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_documented() {
        assert!(glob("a*c", "abbbc"));
        assert!(glob(
            "*.description",
            "sg/nodes.ipPermissions[0].description"
        ));
        assert!(glob("x", "x"));
        assert!(!glob("a*c", "abd"));
        assert!(glob("a*b*c", "a1b2c"));
        assert!(!glob("a*b*c", "a1c"));
        assert!(!glob("ab*ba", "aba"));
    }

    /// A failure event only upstream recorded is shown, not counted; one only wasm-ccm
    /// recorded, or any other difference, is counted.
    #[test]
    fn only_upstream_failures_are_taken_as_retried() {
        let flat = |keys: &[&str]| -> Flat {
            keys.iter()
                .map(|k| (k.to_string(), "recorded".to_string()))
                .collect()
        };
        let failed = "events/service/web/Warning SyncLoadBalancerFailed";
        let compare = |upstream: Flat, ours: Flat| {
            Comparison::new(
                &["created"],
                &[upstream],
                &[ours],
                &["web".to_string()],
                |_| "web".to_string(),
                &[],
            )
        };
        let theirs = compare(flat(&[failed]), flat(&[]));
        assert!(theirs.unlisted.is_empty(), "{:?}", theirs.unlisted);
        assert!(
            theirs.table.contains("upstream retried"),
            "{}",
            theirs.table
        );
        let ours = compare(flat(&[]), flat(&[failed]));
        assert_eq!(ours.unlisted, [format!("created web {failed}")]);
        let other = compare(
            flat(&["events/service/web/Normal EnsuredLoadBalancer"]),
            flat(&[]),
        );
        assert_eq!(other.unlisted.len(), 1);
    }

    #[test]
    fn ids_are_replaced_where_they_stand_alone() {
        let mut names = Names::new();
        names.add("10.0.0.5", "<ip:a>");
        names.add("i-1", "<i:a>");
        assert_eq!(
            names.apply("10.0.0.5 10.0.0.50 i-1/i-12"),
            "<ip:a> 10.0.0.50 <i:a>/i-12"
        );
    }
}
