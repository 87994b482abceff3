//! The ECSs of a batch of Nodes, for `instances-batch`: the cost follows the batch,
//! not the project.
//!
//! Nodes with provider IDs are read with ECS's exact `server_id` filter, up to
//! [`IDS_PER_LISTING`] IDs a listing (`GET /v1/{project_id}/cloudservers/detail?server_id=
//! a,b,...`): ECS answers an ID it does not know with an entry whose fields are all
//! `null` but `id` and `fault`, and the provider reads that (or an ID the answer leaves
//! out) as "no such ECS", a definite answer. A listing ECS refuses (a 400: an ID that
//! is not one) is read ID by ID instead, so one bad provider ID is its Node's answer,
//! not the batch's. Any other failure (throttled, unreachable) fails the batch.
//!
//! Nodes without provider IDs are joining Nodes, a few at a time: each is looked up as
//! upstream's `GetByNodeName` does ([`HuaweiCloud::lookup`]), its failure its own answer.

use std::collections::BTreeMap;

use wasm_ccm_guest::types::{CloudError, Node};

use super::{Server, node_provider_id, parse_provider_id};
use crate::HuaweiCloud;
use crate::api;

/// The most IDs in one `server_id` listing (ECS advises at most 100, for the URL's
/// length: about 3.7 KB of query).
pub const IDS_PER_LISTING: usize = 100;

/// What a Node's ECS is found by.
enum Key {
    /// The ECS ID of its provider ID.
    Id(String),
    /// No provider ID: its name and addresses.
    Lookup,
    /// A provider ID that does not parse: the Node's answer.
    Invalid(CloudError),
}

fn key_of(node: &Node) -> Key {
    match node_provider_id(node) {
        None => Key::Lookup,
        Some(provider_id) => match parse_provider_id(provider_id) {
            Ok(id) => Key::Id(id),
            Err(e) => Key::Invalid(e),
        },
    }
}

/// A Node's ECS: `Ok(None)` when ECS definitely has none.
pub type Found = Result<Option<Server>, CloudError>;

impl HuaweiCloud {
    /// Each Node's ECS, in the Nodes' order (see the module docs). The outer error
    /// fails the whole batch.
    pub fn find_all(&self, nodes: &[Node]) -> Result<Vec<Found>, CloudError> {
        let keys: Vec<Key> = nodes.iter().map(key_of).collect();
        let mut ids: Vec<&str> = keys
            .iter()
            .filter_map(|k| match k {
                Key::Id(id) => Some(id.as_str()),
                _ => None,
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let by_id = self.servers_by_ids(&ids)?;
        Ok(nodes
            .iter()
            .zip(keys)
            .map(|(node, key)| match key {
                Key::Id(id) => by_id.get(&id).cloned().unwrap_or(Ok(None)),
                Key::Invalid(e) => Err(e),
                Key::Lookup => self.lookup(node),
            })
            .collect())
    }

    /// The ECSs `ids` name, by ID (see the module docs).
    fn servers_by_ids(&self, ids: &[&str]) -> Result<BTreeMap<String, Found>, CloudError> {
        let mut by_id = BTreeMap::new();
        for chunk in ids.chunks(IDS_PER_LISTING) {
            let listed = chunk.join(",");
            let limit = IDS_PER_LISTING.to_string();
            let path = api::with_query(
                "/v1/{project_id}/cloudservers/detail",
                &[("server_id", &listed), ("limit", &limit)],
            );
            match self
                .client
                .list_offset::<Server>(api::Service::Ecs, &path, "servers")
            {
                Ok(servers) => {
                    for id in chunk {
                        // An ID ECS does not know is answered as an entry of nulls (its
                        // `fault`): gone. One the answer leaves out (a page cut short,
                        // a server another permission hides) is read by its ID, so only a
                        // 404 says it is gone, as upstream decides.
                        let found = match servers.iter().find(|s| s.id == *id) {
                            Some(server) => Ok(Some(server.clone()).filter(Server::exists)),
                            None => self.server_by_id(id).map_err(CloudError::from),
                        };
                        by_id.insert((*id).to_owned(), found);
                    }
                }
                Err(e) if e.status() == Some(400) => {
                    for id in chunk {
                        let found = self.server_by_id(id).map_err(CloudError::from);
                        by_id.insert((*id).to_owned(), found);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(by_id)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use wasm_ccm_guest::InstancesBatch;
    use wasm_ccm_guest::http::Response;
    use wasm_ccm_guest::testing::MockTransport;

    use super::*;
    use crate::instances::tests::{DETAIL, listing, node, param, provider, server};

    /// 150 Nodes with provider IDs: two listings (100 + 50 IDs), whatever the project
    /// holds; an ID ECS does not know (a `null` entry) is gone; one it leaves out is read
    /// by its ID (gone on a 404, an error on anything else); a bad provider ID is its
    /// Node's error only.
    #[test]
    fn a_batch_costs_a_listing_per_hundred_nodes() {
        let cloud = MockTransport::new();
        cloud.on_with("GET", DETAIL, |request| {
            let ids = param(request.url_text(), "server_id").expect("by ID");
            assert_eq!(param(request.url_text(), "limit").as_deref(), Some("100"));
            let servers = ids
                .split(',')
                .filter(|id| *id != "s-missing")
                .map(|id| match id {
                    "s-unknown" => json!({"id": id, "fault": {"code": 404}, "status": null,
                                          "name": null, "addresses": null, "flavor": null}),
                    "s-off" => server(id, id, "SHUTOFF", "10.0.1.1"),
                    _ => server(id, id, "ACTIVE", "10.0.0.1"),
                })
                .collect();
            Ok(listing(servers))
        });
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/s-missing",
            Response::with_json(
                404,
                &json!({"error": {"code": "Ecs.0114", "message": "Instance not found"}}),
            ),
        );
        let _installed = cloud.install();
        let provider = provider("");
        let mut nodes: Vec<_> = (0..147)
            .map(|i| {
                node(
                    &format!("n{i}"),
                    Some(&format!("huaweicloud://s{i:03}")),
                    None,
                )
            })
            .collect();
        nodes.push(node("off", Some("s-off"), None));
        nodes.push(node("unknown", Some("huaweicloud://s-unknown"), None));
        nodes.push(node("missing", Some("huaweicloud://s-missing"), None));
        nodes.push(node("bad", Some("huaweicloud://a/b"), None));

        let exist = provider.instances_exist(nodes.clone()).unwrap();
        assert_eq!(exist.len(), 151);
        assert!(exist[..148].iter().all(|e| *e == Ok(true)));
        assert_eq!(exist[148], Ok(false));
        assert_eq!(exist[149], Ok(false));
        assert!(matches!(exist[150], Err(CloudError::Other(_))));
        assert_eq!(cloud.count("GET", DETAIL), 2);
        assert_eq!(cloud.count("GET", "/v1/p1/cloudservers/s-missing"), 1);

        let shutdown = provider.instances_shutdown(nodes).unwrap();
        assert_eq!(shutdown[0], Ok(false));
        assert_eq!(shutdown[147], Ok(true));
        assert_eq!(shutdown[148], Err(CloudError::InstanceNotFound));
    }

    /// A listing ECS refuses (a 400) is read ID by ID; a throttled one fails the batch.
    #[test]
    fn a_refused_listing_is_read_id_by_id_and_throttling_fails_the_batch() {
        let cloud = MockTransport::new();
        cloud.on(
            "GET",
            DETAIL,
            Response::with_json(
                400,
                &json!({"error": {"code": "Ecs.0005", "message": "bad"}}),
            ),
        );
        cloud.on(
            "GET",
            "/v1/p1/cloudservers/s1",
            Response::with_json(
                200,
                &json!({"server": server("s1", "n1", "ACTIVE", "10.0.0.1")}),
            ),
        );
        cloud.on("GET", "/v1/p1/cloudservers/not-an-id", Response::new(400));
        let _installed = cloud.install();
        let provider = provider("");
        let nodes = vec![
            node("n1", Some("huaweicloud://s1"), None),
            node("n2", Some("huaweicloud://not-an-id"), None),
        ];
        let exist = provider.instances_exist(nodes.clone()).unwrap();
        assert_eq!(exist[0], Ok(true));
        assert!(matches!(exist[1], Err(CloudError::Other(_))));

        cloud.on(
            "GET",
            DETAIL,
            Response::new(429).with_header("Retry-After", "3"),
        );
        assert!(matches!(
            provider.instances_exist(nodes),
            Err(CloudError::RetryAfter(_))
        ));
    }

    /// Metadata: one listing for the IDs, one `os-interface` per Node; a joining Node
    /// looked up by name.
    #[test]
    fn metadata_reads_each_nodes_interfaces() {
        let cloud = MockTransport::new();
        cloud.on_with("GET", DETAIL, |request| {
            let url = request.url_text();
            if let Some(ids) = param(url, "server_id") {
                let servers = ids
                    .split(',')
                    .map(|id| server(id, &format!("node-{id}"), "ACTIVE", "10.0.0.1"))
                    .collect();
                return Ok(listing(servers));
            }
            assert_eq!(param(url, "name").as_deref(), Some("node-new"));
            Ok(listing(vec![server(
                "s-new", "node-new", "ACTIVE", "10.0.0.9",
            )]))
        });
        for id in ["s1", "s2", "s-new"] {
            cloud.on(
                "GET",
                &format!("/v1/p1/cloudservers/{id}/os-interface"),
                Response::with_json(200, &json!({"interfaceAttachments": []})),
            );
        }
        let _installed = cloud.install();
        let provider = provider("");
        let answers = provider
            .instances_metadata(vec![
                node("node-s1", Some("huaweicloud://s1"), None),
                node("node-s2", Some("s2"), None),
                node("node-new", None, Some("10.0.0.9")),
            ])
            .unwrap();
        let ids: Vec<String> = answers
            .into_iter()
            .map(|a| a.unwrap().provider_id)
            .collect();
        assert_eq!(ids, ["huaweicloud://s1", "s2", "huaweicloud://s-new"]);
        assert_eq!(cloud.count("GET", DETAIL), 2);
        assert_eq!(cloud.requests().len(), 5);
    }
}
