//! The cluster's servers, kept in the shared cache, so that a batch costs what the
//! cluster holds, not what the project holds.
//!
//! A batch first brings the kept servers up to date with one listing of what changed
//! since the previous one (`GET /servers/detail?changes-since=...`, a filter Nova
//! serves every user, whose answer includes the servers deleted since, as `DELETED`).
//! Its Nodes that no kept server answers are then found by name, many Nodes a listing
//! (`name=^(node-a|node-b|...)$`: Nova's `name` filter is a regular expression); a
//! Node without a provider ID is always found so (only a listing says that one server
//! has its name). A Node whose provider ID names a server of another name is read by
//! ID (more than [`MAX_BY_ID`] of them: the project is listed once). The servers found
//! are kept, trimmed to what a Node's answer reads ([`trimmed`]), for [`RESYNC`]; then
//! the entry expires and they are found by name again, which also picks up what
//! `changes-since` does not show (a floating IP associated changes Nova's addresses,
//! not the server's `updated`).
//!
//! The times given to Nova are Nova's own: the `Date` of the answer the kept servers
//! are as of, less [`OVERLAP_SECS`] (a change committed late, clocks of Nova's
//! services apart). This instance's clock only says when a refresh is [`FRESH_SECS`]
//! old (the batches of one status pass share one refresh) and when the entry expires.
//!
//! Instances of the provider share the entry; the last to write it wins. Each writes
//! servers and the `changes-since` they are current from together, so a lost write only
//! costs a lookup again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use wasm_ccm_guest::types::{CloudError, Node};
use wasm_ccm_guest::{cache, url};

use super::{Found, Subports, clock, deleted, parse_provider_id, regex_escape};
use crate::OpenStack;
use crate::api::{self, Endpoints};

/// How long the kept servers are trusted before they are all found again by name.
const RESYNC: Duration = Duration::from_secs(3600);
/// A refresh this recent (seconds, this instance's clock) is not made again.
const FRESH_SECS: u64 = 20;
/// How far before the time of the answer the kept servers are as of the next
/// `changes-since` starts (seconds).
const OVERLAP_SECS: u64 = 60;
/// The most bytes of one `name` pattern, percent-encoded: as a ports listing's 100 IDs,
/// well under the 8 KB request lines servers take.
const NAME_QUERY_BYTES: usize = 4000;
/// The most servers read one by one in a batch (provider IDs no kept server and no
/// name answers); more and the project is listed.
const MAX_BY_ID: usize = 20;
/// Servers a page (Nova's default `osapi_max_limit`).
const PAGE: &str = "1000";

/// The kept servers: the shared cache's `servers/<compute endpoint>`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Known {
    /// When the entry was made (this instance's clock, seconds): it expires
    /// [`RESYNC`] later.
    started: u64,
    /// When it was last brought up to date (this instance's clock, seconds).
    refreshed: u64,
    /// Nova's time (seconds) the next `changes-since` starts at; `None` before an
    /// answer.
    since: Option<u64>,
    /// The servers Nodes were found on, by ID, [`trimmed`].
    servers: BTreeMap<String, Value>,
    /// Kept servers Nova listed as `DELETED` (Nova never gives an ID again).
    gone: BTreeSet<String>,
}

impl Known {
    /// The entry under `key`, else a new one started `now`.
    fn load(key: &str, now: u64) -> Self {
        cache::get_json(key).unwrap_or_else(|| Known {
            started: now,
            refreshed: now,
            ..Known::default()
        })
    }

    /// Stores the entry under `key` until [`RESYNC`] after it was started (not when no
    /// answer was read: there is nothing to keep).
    fn save(&self, key: &str, now: u64) {
        let left = (self.started + RESYNC.as_secs()).saturating_sub(now);
        if self.since.is_some() && left > 0 {
            // Too large for the cache: the next batch finds its servers again.
            let _ = cache::set_json(key, self, Duration::from_secs(left));
        }
    }

    /// Whether a refresh is due: something is kept, and the last refresh is at least
    /// [`FRESH_SECS`] old.
    fn due(&self, now: u64) -> bool {
        self.since.is_some() && now.saturating_sub(self.refreshed) >= FRESH_SECS
    }

    /// Whether the server `id` is answered without a lookup: kept, or gone.
    fn answers(&self, id: &str) -> bool {
        self.servers.contains_key(id) || self.gone.contains(id)
    }

    /// Applies a `changes-since` answer: kept servers replaced, deleted ones gone. The
    /// changed servers not kept are returned by ID (a joining Node's may be one).
    fn apply(&mut self, changed: Vec<Value>) -> BTreeMap<String, Value> {
        let mut others = BTreeMap::new();
        for server in changed {
            let Some(id) = server["id"].as_str().map(str::to_owned) else {
                continue;
            };
            if deleted(&server) {
                if self.servers.remove(&id).is_some() {
                    self.gone.insert(id);
                }
            } else if let Some(kept) = self.servers.get_mut(&id) {
                *kept = trimmed(&server);
            } else {
                others.insert(id, trimmed(&server));
            }
        }
        others
    }
}

/// What a Node's server is found by.
enum Key {
    /// No provider ID: the Node's name.
    Name,
    /// The server ID of its provider ID.
    Id(String),
    /// A provider ID that does not parse ([`OpenStack::locate`] answers the error).
    Invalid,
}

/// What `node`'s server is found by.
fn key_of(node: &Node) -> Key {
    match node.provider_id.as_deref().filter(|p| !p.is_empty()) {
        None => Key::Name,
        Some(p) => parse_provider_id(p).map_or(Key::Invalid, |r| Key::Id(r.id)),
    }
}

/// What a Node's answer reads of a server (the rest is not kept): its ID, name,
/// status, zone, access IPs, flavor name or ID, `hostname` metadata and Nova's
/// addresses (each address and its type).
fn trimmed(server: &Value) -> Value {
    let mut out = Map::new();
    let keys = [
        "id",
        "name",
        "status",
        "OS-EXT-AZ:availability_zone",
        "accessIPv4",
        "accessIPv6",
    ];
    for key in keys {
        if let Some(value) = server.get(key) {
            out.insert(key.to_owned(), value.clone());
        }
    }
    out.insert(
        "flavor".into(),
        picked(&server["flavor"], &["original_name", "id"]),
    );
    out.insert(
        "metadata".into(),
        picked(&server["metadata"], &["hostname"]),
    );
    out.insert("addresses".into(), trimmed_addresses(&server["addresses"]));
    Value::Object(out)
}

/// The `keys` of the object `value` (an empty object otherwise).
fn picked(value: &Value, keys: &[&str]) -> Value {
    let picked: Map<String, Value> = keys
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), value.get(*k)?.clone())))
        .collect();
    Value::Object(picked)
}

/// Nova's addresses, each with its `addr` and `OS-EXT-IPS:type` only.
fn trimmed_addresses(addresses: &Value) -> Value {
    let networks: Map<String, Value> = addresses
        .as_object()
        .into_iter()
        .flatten()
        .map(|(network, list)| {
            let list = list
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| picked(a, &["addr", "OS-EXT-IPS:type"]))
                .collect();
            (network.clone(), Value::Array(list))
        })
        .collect();
    Value::Object(networks)
}

/// `^(a|b|...)$` patterns matching `names` literally, each at most
/// [`NAME_QUERY_BYTES`] percent-encoded (a longer name alone).
fn name_patterns(names: &[&str]) -> Vec<String> {
    let mut patterns = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut bytes = 0;
    for name in names {
        let escaped = regex_escape(name);
        // The name and its `|` (`%7C`).
        let cost = url::encode_component(&escaped).len() + 3;
        if !current.is_empty() && bytes + cost > NAME_QUERY_BYTES {
            patterns.push(alternation(&current));
            current.clear();
            bytes = 0;
        }
        bytes += cost;
        current.push(escaped);
    }
    if !current.is_empty() {
        patterns.push(alternation(&current));
    }
    patterns
}

/// `^(a|b|...)$`.
fn alternation(escaped: &[String]) -> String {
    format!("^({})$", escaped.join("|"))
}

/// Where the next `changes-since` starts: Nova's time of an answer (its `Date`, else
/// `now` on this instance's clock), less [`OVERLAP_SECS`].
fn next_since(date: Option<&str>, now: u64) -> u64 {
    date.and_then(clock::parse_http_date)
        .unwrap_or(now)
        .saturating_sub(OVERLAP_SECS)
}

/// A server found, without its ports yet.
fn found(server: Value) -> Found {
    Found {
        server,
        ports: Vec::new(),
        subports: Subports::new(),
    }
}

/// What a batch reads of Nova besides the kept servers.
#[derive(Default)]
struct Read {
    /// Changed servers not kept ([`Known::apply`]), by ID.
    changed: BTreeMap<String, Value>,
    /// Servers found by name or by ID.
    looked: Vec<Value>,
    /// The `Date` of the first answer read by name (the oldest of those servers).
    date: Option<String>,
}

impl Read {
    /// Whether the server `id` was read.
    fn has(&self, id: &str) -> bool {
        self.changed.contains_key(id) || self.looked.iter().any(|s| s["id"] == id)
    }
}

impl OpenStack {
    /// The servers a batch of `nodes` needs (see the module's documentation).
    pub(super) fn cluster_servers(&self, nodes: &[Node]) -> Result<Vec<Found>, CloudError> {
        self.cluster_servers_at(nodes, clock::unix_now())
    }

    /// [`OpenStack::cluster_servers`] at `now` (this instance's clock, seconds).
    fn cluster_servers_at(&self, nodes: &[Node], now: u64) -> Result<Vec<Found>, CloudError> {
        let endpoints = Endpoints::get(&self.config)?;
        let compute = self.compute(&endpoints)?;
        let key = format!("servers/{compute}");
        let nodes: Vec<&Node> = nodes
            .iter()
            .filter(|n| self.other_region(n).is_none())
            .collect();
        let mut known = Known::load(&key, now);
        let mut read = Read::default();
        if known.due(now) {
            read.changed = self.refresh(&compute, &mut known, now)?;
        }
        self.by_names(&compute, &names_to_find(&nodes, &known, &read), &mut read)?;
        if known.since.is_none() {
            known.since = Some(next_since(read.date.as_deref(), now));
        }
        let unfound = unfound(&nodes, &known, &read);
        let view = if unfound.len() > MAX_BY_ID {
            self.all_servers()?
        } else {
            for node in unfound {
                read.looked.extend(self.find_server(node)?);
            }
            view_of(&nodes, &known, read)
        };
        self.learn(&nodes, &view, &mut known);
        known.save(&key, now);
        Ok(view)
    }

    /// Brings `known` up to date with one listing of what changed since its `since`:
    /// the changed servers it does not keep, by ID.
    fn refresh(
        &self,
        compute: &str,
        known: &mut Known,
        now: u64,
    ) -> Result<BTreeMap<String, Value>, CloudError> {
        let since = clock::iso8601(known.since.unwrap_or_default());
        let request = Self::nova(&format!("{compute}/servers/detail"))
            .query("changes-since", &since)
            .query("limit", PAGE);
        let (changed, date) = api::list_dated(request, "servers", "list the servers changed")?;
        known.since = Some(next_since(date.as_deref(), now));
        known.refreshed = now;
        Ok(known.apply(changed))
    }

    /// Lists the servers named `names` (exactly: Nova's filter also matches case-
    /// insensitively on some databases) into `read`.
    fn by_names(&self, compute: &str, names: &[&str], read: &mut Read) -> Result<(), CloudError> {
        let wanted: BTreeSet<&str> = names.iter().copied().collect();
        for pattern in name_patterns(names) {
            let request = Self::nova(&format!("{compute}/servers/detail"))
                .query("name", &pattern)
                .query("limit", PAGE);
            let (servers, date) =
                api::list_dated(request, "servers", "list the Nodes' servers by name")?;
            read.date = read.date.take().or(date);
            read.looked.extend(
                servers.into_iter().filter(|s| {
                    !deleted(s) && s["name"].as_str().is_some_and(|n| wanted.contains(n))
                }),
            );
        }
        Ok(())
    }

    /// Keeps the servers `nodes` are found on in `view`.
    fn learn(&self, nodes: &[&Node], view: &[Found], known: &mut Known) {
        for node in nodes {
            if let Ok(Some(found)) = self.locate(node, view)
                && let Some(id) = found.server["id"].as_str()
            {
                known.servers.insert(id.to_owned(), trimmed(&found.server));
            }
        }
    }
}

/// The names to list: every Node's without a provider ID, and those whose provider ID
/// neither `known` nor `read` answers.
fn names_to_find<'a>(nodes: &[&'a Node], known: &Known, read: &Read) -> Vec<&'a str> {
    let mut names: Vec<&str> = nodes
        .iter()
        .copied()
        .filter(|node| match key_of(node) {
            Key::Name => true,
            Key::Id(id) => !known.answers(&id) && !read.changed.contains_key(&id),
            Key::Invalid => false,
        })
        .map(|node| node.metadata.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The Nodes whose provider ID neither `known` nor `read` answers (their servers are
/// named otherwise, or gone).
fn unfound<'a>(nodes: &[&'a Node], known: &Known, read: &Read) -> Vec<&'a Node> {
    nodes
        .iter()
        .copied()
        .filter(|node| match key_of(node) {
            Key::Id(id) => !known.answers(&id) && !read.has(&id),
            Key::Name | Key::Invalid => false,
        })
        .collect()
}

/// The servers `nodes` are found among: the kept or changed servers their provider IDs
/// name, and every server read by name or ID (the newest reading of a server wins).
fn view_of(nodes: &[&Node], known: &Known, read: Read) -> Vec<Found> {
    let mut by_id: BTreeMap<String, Value> = BTreeMap::new();
    for node in nodes {
        if let Key::Id(id) = key_of(node)
            && let Some(server) = known.servers.get(&id).or_else(|| read.changed.get(&id))
        {
            by_id.insert(id, server.clone());
        }
    }
    for server in read.looked {
        if let Some(id) = server["id"].as_str() {
            by_id.insert(id.to_owned(), trimmed(&server));
        }
    }
    by_id.into_values().map(found).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wasm_ccm_guest::InstancesBatch;
    use wasm_ccm_guest::http::{Request, Response};
    use wasm_ccm_guest::testing::MockTransport;
    use wasm_ccm_guest::types::BoolAnswer;

    /// The kept servers' cache key with the catalog of [`provider`].
    const KEY: &str = "servers/http://nova/v2.1";
    /// The `Date` of the first listing, and the `changes-since` it makes.
    const FIRST: &str = "Tue, 02 Jun 2026 10:00:00 GMT";
    const FIRST_SINCE: &str = "2026-06-02T09:59:00Z";
    /// The `Date` of the second listing.
    const SECOND: &str = "Tue, 02 Jun 2026 10:05:00 GMT";

    /// A provider whose catalog has Nova at `http://nova/v2.1`, with an empty cache.
    fn provider(cloud: &MockTransport) -> OpenStack {
        cache::clear();
        let catalog = json!({"catalog": [{"type": "compute", "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": "http://nova/v2.1"}]}]});
        cloud.on(
            "GET",
            "/v3/auth/catalog",
            Response::with_json(200, &catalog),
        );
        OpenStack {
            config: crate::config::Config::parse("[Global]\nauth-url = https://k/v3\n").unwrap(),
        }
    }

    /// Node `name`, with `openstack:///<server>` when `server` is given.
    fn node(name: &str, server: Option<&str>) -> Node {
        Node {
            provider_id: server.map(|s| format!("openstack:///{s}")),
            ..wasm_ccm_guest::testing::node(name)
        }
    }

    /// Nodes `node-0` to `node-9` on servers `srv-0` to `srv-9`.
    fn ten_nodes() -> Vec<Node> {
        (0..10)
            .map(|i| node(&format!("node-{i}"), Some(&format!("srv-{i}"))))
            .collect()
    }

    /// Server `id` named `name` as Nova lists it.
    fn server(id: &str, name: &str, status: &str) -> Value {
        json!({"id": id, "name": name, "status": status, "tenant_id": "p",
               "flavor": {"original_name": "m1.small", "vcpus": 2},
               "OS-EXT-AZ:availability_zone": "nova", "metadata": {"team": "a"},
               "addresses": {"private": [{"addr": "10.0.0.5", "version": 4,
                                          "OS-EXT-IPS:type": "fixed"}]}})
    }

    /// A listing of `servers`, answered at `date`.
    fn listing(servers: Vec<Value>, date: &str) -> Response {
        Response::with_json(200, &json!({"servers": servers})).with_header("Date", date)
    }

    /// The query of `request`.
    fn query(request: &Request) -> String {
        let url = request.url().unwrap().path_and_query;
        url.split_once('?')
            .map(|(_, q)| q.to_owned())
            .unwrap_or_default()
    }

    /// The queries of the server listings sent, in order.
    fn listings(cloud: &MockTransport) -> Vec<String> {
        cloud
            .requests()
            .iter()
            .filter(|r| {
                r.url()
                    .unwrap()
                    .path_and_query
                    .starts_with("/v2.1/servers/detail")
            })
            .map(query)
            .collect()
    }

    /// Moves the kept servers `seconds` into the past, as time passing would.
    fn age(seconds: u64) {
        let mut known: Known = cache::get_json(KEY).expect("servers kept");
        known.started -= seconds;
        known.refreshed -= seconds;
        cache::set_json(KEY, &known, RESYNC).unwrap();
    }

    /// Whether each Node's server exists.
    fn exist(provider: &OpenStack, nodes: &[Node]) -> Vec<bool> {
        provider
            .instances_exist(nodes.to_vec())
            .unwrap()
            .into_iter()
            .map(|a| match a {
                BoolAnswer::Ok(b) => b,
                BoolAnswer::Err(e) => panic!("{e:?}"),
            })
            .collect()
    }

    /// The Nodes' servers are found by name in one listing and kept; after
    /// [`FRESH_SECS`] one `changes-since` listing (from the first answer's `Date`, less
    /// the overlap) brings them up to date: the server it lists as `DELETED` is gone,
    /// nothing is listed by name again, and a batch right after reads nothing.
    #[test]
    fn a_server_listed_deleted_since_is_gone_for_one_request() {
        let cloud = MockTransport::new();
        let provider = provider(&cloud);
        let nodes = ten_nodes();
        cloud.on_with("GET", "/v2.1/servers/detail", |request| {
            let query = query(request);
            if query.contains("changes-since=") {
                let gone = json!({"id": "srv-3", "name": "node-3", "status": "DELETED"});
                let other = server("srv-x", "elsewhere", "ACTIVE");
                return Ok(listing(vec![gone, other], SECOND));
            }
            assert!(query.contains("name="), "{query}");
            let servers = (0..10)
                .map(|i| server(&format!("srv-{i}"), &format!("node-{i}"), "ACTIVE"))
                .collect();
            Ok(listing(servers, FIRST))
        });
        let _installed = cloud.install();

        assert_eq!(exist(&provider, &nodes), [true; 10]);
        let first = listings(&cloud);
        assert_eq!(first.len(), 1, "{first:?}");
        let names: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
        let pattern = url::encode_component(&format!("^({})$", names.join("|")));
        assert_eq!(first[0], format!("name={pattern}&limit=1000"));

        age(FRESH_SECS);
        let mut expected = [true; 10];
        expected[3] = false;
        assert_eq!(exist(&provider, &nodes), expected);
        let second = listings(&cloud)[1..].to_vec();
        assert_eq!(
            second,
            [format!(
                "changes-since={}&limit=1000",
                url::encode_component(FIRST_SINCE)
            )]
        );
        // Kept: the servers, not the project's other server; srv-3 is gone.
        let known: Known = cache::get_json(KEY).unwrap();
        assert_eq!(known.servers.len(), 9);
        assert!(known.gone.contains("srv-3"));
        assert_eq!(
            known.since.map(clock::iso8601).as_deref(),
            Some("2026-06-02T10:04:00Z")
        );

        // The next batch of the same pass reads nothing.
        let before = cloud.requests().len();
        assert_eq!(exist(&provider, &nodes), expected);
        assert_eq!(cloud.requests().len(), before);
    }

    /// A Node without a provider ID is always found by name (its name must name one
    /// server); one whose server is named otherwise is read by ID; a changed server not
    /// kept answers a Node joining; after [`RESYNC`] the servers are found again.
    #[test]
    fn nodes_are_found_by_name_by_id_and_among_changes() {
        let cloud = MockTransport::new();
        let provider = provider(&cloud);
        let mut nodes = ten_nodes();
        nodes[9] = node("node-9", Some("srv-renamed"));
        let new = node("node-new", Some("srv-new"));
        let unnamed = node("node-none", None);
        cloud.on_with("GET", "/v2.1/servers/detail", |request| {
            let query = query(request);
            if query.contains("changes-since=") {
                let new = server("srv-new", "node-new", "ACTIVE");
                return Ok(listing(vec![new], SECOND));
            }
            // Nova matches the name anywhere unless anchored, and may ignore case.
            let mut servers: Vec<Value> = (0..9)
                .map(|i| server(&format!("srv-{i}"), &format!("node-{i}"), "ACTIVE"))
                .collect();
            servers.push(server("srv-upper", "NODE-0", "ACTIVE"));
            Ok(listing(servers, FIRST))
        });
        let renamed = json!({"server": server("srv-renamed", "vm-9", "SHUTOFF")});
        cloud.on(
            "GET",
            "/v2.1/servers/srv-renamed",
            Response::with_json(200, &renamed),
        );
        let _installed = cloud.install();

        let mut batch = nodes.clone();
        batch.push(unnamed.clone());
        let mut expected = vec![true; 10];
        expected.push(false);
        assert_eq!(exist(&provider, &batch), expected);
        assert_eq!(listings(&cloud).len(), 1);
        assert_eq!(cloud.count("GET", "/v2.1/servers/srv-renamed"), 1);

        // Later: a joining Node's server among the changes; the unnamed Node is listed
        // by name again, the others are kept (srv-renamed too, read by ID no more).
        age(FRESH_SECS);
        let mut batch = nodes.clone();
        batch.push(new);
        batch.push(unnamed);
        let mut expected = vec![true; 11];
        expected.push(false);
        assert_eq!(exist(&provider, &batch), expected);
        let queries = listings(&cloud);
        assert_eq!(queries.len(), 3, "{queries:?}");
        assert!(queries[1].starts_with("changes-since="));
        assert_eq!(
            queries[2],
            format!("name={}&limit=1000", url::encode_component("^(node-none)$"))
        );
        assert_eq!(cloud.count("GET", "/v2.1/servers/srv-renamed"), 1);

        // After RESYNC the entry has expired (its TTL): every Node is found again.
        cache::delete(KEY);
        assert_eq!(exist(&provider, &nodes), [true; 10]);
        let queries = listings(&cloud);
        assert_eq!(queries.len(), 4, "{queries:?}");
        assert!(queries[3].starts_with("name="));
        assert_eq!(cloud.count("GET", "/v2.1/servers/srv-renamed"), 2);
    }

    /// Kept servers hold what a Node's answer reads, no more.
    #[test]
    fn kept_servers_are_trimmed() {
        let full = server("srv-1", "node-1", "ACTIVE");
        assert_eq!(
            trimmed(&full),
            json!({"id": "srv-1", "name": "node-1", "status": "ACTIVE",
                   "OS-EXT-AZ:availability_zone": "nova",
                   "flavor": {"original_name": "m1.small"}, "metadata": {},
                   "addresses": {"private": [{"addr": "10.0.0.5", "OS-EXT-IPS:type": "fixed"}]}})
        );
    }

    /// Names are listed literally, a pattern per [`NAME_QUERY_BYTES`].
    #[test]
    fn names_are_listed_many_a_request() {
        assert_eq!(name_patterns(&["a.b", "c"]), ["^(a\\.b|c)$"]);
        let names: Vec<String> = (0..1000).map(|i| format!("node-{i:04}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let patterns = name_patterns(&names);
        // 12 bytes a name (`node-0000%7C`): 333 a pattern.
        assert_eq!(patterns.len(), 4);
        for pattern in &patterns {
            assert!(url::encode_component(pattern).len() <= NAME_QUERY_BYTES + 10);
        }
        let listed: usize = patterns.iter().map(|p| p.matches('|').count() + 1).sum();
        assert_eq!(listed, 1000);
        let long = "x".repeat(NAME_QUERY_BYTES + 1);
        assert_eq!(name_patterns(&[&long, "y"]).len(), 2);
    }

    /// `changes-since` starts at the answer's `Date` less the overlap; without a
    /// readable one, at this instance's clock less the overlap.
    #[test]
    fn since_is_novas_time_less_the_overlap() {
        assert_eq!(clock::iso8601(next_since(Some(FIRST), 0)), FIRST_SINCE);
        assert_eq!(next_since(Some("soon"), 1000), 1000 - OVERLAP_SECS);
        assert_eq!(next_since(None, 10), 0);
    }
}
