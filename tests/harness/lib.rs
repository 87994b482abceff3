//! Shared setup for the integration tests. Where to start:
//!
//! - [`stack`]: the controller manager as a process, against the API server double and
//!   the simulated cloud ([`Stack`]), and the commands the tests run;
//! - [`provider`]: a provider loaded in process ([`Simulated`], the hostile fixture);
//! - [`objects`]: Nodes and Services as kubelet and users make them; [`events`]: the
//!   events recorded about them;
//! - [`wait`]: waiting on a condition with a deadline; [`metrics`]: reading `/metrics`;
//! - [`fixtures`]: built guests and binaries, temporary and provider directories;
//! - [`raw_http`]: a misbehaving HTTP server, a plain GET; [`ports`]: the controller
//!   managers' secure ports, bound here and handed down;
//! - [`vendor`]: a vendor's provider and policy in an operator's home directory, for the
//!   tools' confinement of credential files;
//! - the peers: [`aws`] (moto), [`keystone`], [`openstack`] (Keystone and the OpenStack
//!   double), [`huaweicloud`] (the Huawei Cloud double and Huawei's SDK as a judge), [`kube_apiserver`] (the real API server), [`https`] (the secure port);
//! - [`oracle`] and [`upstream`]: comparing upstream's controller managers with ours.
//!
//! Guests are built once by `scripts/build-guests.sh` (the README's test command runs
//! it first); tests never build them. tests/README.md says which test needs which peer.

/// moto, the AWS emulator, as a test peer.
pub mod aws;
pub mod bench;
pub mod events;
pub mod fixtures;
pub mod helm;
pub mod https;
pub mod huaweicloud;
/// A real Keystone with a service double in its catalog.
pub mod keystone;
pub mod kube_apiserver;
pub mod metrics;
pub use moto_peer as moto;
pub mod objects;
pub mod oci_registry;
pub mod openstack;
pub mod oracle;
pub mod ports;
pub mod provider;
pub mod raw_http;
pub mod stack;
pub mod upstream;
pub mod vendor;
pub mod wait;

pub use bench::*;
pub use fixtures::*;
pub use metrics::*;
pub use objects::*;
pub use ports::*;
pub use provider::*;
pub use raw_http::*;
pub use stack::*;
pub use wait::*;
