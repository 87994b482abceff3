//! occm's `cloud.conf` knowledge shared by the OpenStack provider (`guests/openstack`)
//! and `wasm-ccm import-occm-config` (`guests/openstack/occm-import`, which turns
//! occm's `cloud.conf` into the provider's cloud config, its policy and the credentials
//! Secret's files).
//!
//! Start at [`policy_keys`]: the one table of occm's `[Global]` keys that wasm-ccm's
//! host holds instead of the provider (the Keystone login and its secrets, the TLS
//! files, clouds.yaml). The provider refuses or skips them; the import moves them out
//! of `cloud.conf`.

#![forbid(unsafe_code)]

pub mod policy_keys;
