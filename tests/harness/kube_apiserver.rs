//! The real Kubernetes API server for tests: the `kube-apiserver-peer` crate (shared
//! with the playground), re-exported where the tests have always found it.

pub use kube_apiserver_peer::{Audited, KubeApiServer, client_for};
