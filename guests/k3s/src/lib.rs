//! The wasm-ccm provider for K3s (provider name `k3s`), whose cloud is the Kubernetes
//! Node objects themselves, as K3s's embedded cloud controller (k3s-io/k3s
//! `pkg/cloudprovider/`). It makes no HTTP request at all: its policy allows no host.
//!
//! Where a newcomer starts:
//! - [`instances`]: `instances-v2`, K3s's `InstanceExists` (always true),
//!   `InstanceShutdown` (always false) and `InstanceMetadata` (the provider ID
//!   `k3s://<node-name>`, addresses from the annotations the K3s agent writes on its
//!   own Node, `k3s.io/internal-ip` and the like), and `instances-batch`, the same
//!   answers node by node (there is no I/O to batch);
//! - [`config`]: the cloud config, gcfg `[Pools]` sections holding
//!   kube-vip-cloud-provider's ConfigMap keys (`cidr-<namespace>`, `range-global`, ...);
//! - [`pools`]: kube-vip-cloud-provider's address allocation rules, pure and
//!   unit-tested;
//! - [`load_balancer`]: `load-balancer`, addresses from those pools recorded in
//!   `kube-vip.io/loadbalancerIPs`, the Services already holding addresses read with
//!   contract 0.3's `services` import.
//!
//! # K3s or RKE2
//!
//! K3s names its provider, its provider IDs and its annotations after the program
//! (`version.Program`): `k3s` in K3s, `rke2` in RKE2, which builds the same package.
//! The program here is [`PROGRAM`], chosen at build time: `k3s` by default, `rke2` with
//! the cargo feature `rke2` (provider name `rke2`, provider IDs `rke2://<node>`,
//! annotations `rke2.io/internal-ip`, ...).
//!
//! K3s answers `HasClusterID` false (it tags nothing), and so does this provider: the
//! controller manager runs it with `--allow-untagged-cloud`, which upstream's
//! controller manager needs for such a provider (K3s's own skips that check).
//!
//! Build: `cargo build --target wasm32-wasip2 --release -p k3s-provider`.

pub mod config;
pub mod instances;
pub mod load_balancer;
pub mod pools;

use wasm_ccm_guest::Provider;

#[allow(warnings)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        inline: "
            package wasm-ccm:k3s;
            world k3s {
                export wasm-ccm:provider/identity@0.3.0;
                export wasm-ccm:provider/instances-v2@0.3.0;
                export wasm-ccm:provider/instances-batch@0.3.0;
                export wasm-ccm:provider/load-balancer@0.3.0;
            }
        ",
        world: "wasm-ccm:k3s/k3s",
        with: { "wasm-ccm:provider/types@0.3.0": wasm_ccm_guest::types },
    });
}

/// The program name as a literal, for `concat!` (K3s's `version.Program`).
#[cfg(not(feature = "rke2"))]
macro_rules! program {
    () => {
        "k3s"
    };
}

/// The program name as a literal, for `concat!` (RKE2's `version.Program`).
#[cfg(feature = "rke2")]
macro_rules! program {
    () => {
        "rke2"
    };
}

/// K3s's `version.Program`: the provider name (`--cloud-provider k3s`), the scheme of
/// provider IDs (`k3s://<node-name>`), the default instance type and the prefix of the
/// address annotations. `rke2` with the cargo feature `rke2`.
pub const PROGRAM: &str = program!();

/// `<program>.io/internal-ip` (K3s's `InternalIPKey`): the node's internal IPs, a comma
/// list (IPv4 and IPv6), as an annotation; a single address as a label (older agents).
pub const INTERNAL_IP_KEY: &str = concat!(program!(), ".io/internal-ip");
/// `<program>.io/external-ip` (`ExternalIPKey`), read as [`INTERNAL_IP_KEY`].
pub const EXTERNAL_IP_KEY: &str = concat!(program!(), ".io/external-ip");
/// `<program>.io/internal-dns` (`InternalDNSKey`): a comma list, annotation only.
pub const INTERNAL_DNS_KEY: &str = concat!(program!(), ".io/internal-dns");
/// `<program>.io/external-dns` (`ExternalDNSKey`): a comma list, annotation only.
pub const EXTERNAL_DNS_KEY: &str = concat!(program!(), ".io/external-dns");
/// `<program>.io/hostname` (`HostnameKey`): one name, annotation or label.
pub const HOSTNAME_KEY: &str = concat!(program!(), ".io/hostname");

/// The provider: what `initialize` read from the cloud config.
pub struct K3s {
    config: config::Config,
}

impl K3s {
    /// The address pools of the cloud config.
    pub fn pools(&self) -> &pools::PoolConfig {
        &self.config.pools
    }
}

impl Provider for K3s {
    const NAME: &'static str = PROGRAM;

    fn initialize(cloud_config: &[u8]) -> Result<Self, String> {
        let config = config::Config::parse(cloud_config)?;
        let pools = config.pools.namespaces().join(",");
        wasm_ccm_guest::log::info("initialized", &[("program", PROGRAM), ("pools", &pools)]);
        Ok(K3s { config })
    }

    /// K3s's `HasClusterID`: false, it tags nothing.
    fn has_cluster_id(&self) -> bool {
        false
    }
}

wasm_ccm_guest::export_provider!(K3s with_types_in bindings,
    exports: [instances_v2, instances_batch, load_balancer]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_program() {
        #[cfg(not(feature = "rke2"))]
        {
            assert_eq!(PROGRAM, "k3s");
            assert_eq!(INTERNAL_IP_KEY, "k3s.io/internal-ip");
            assert_eq!(EXTERNAL_DNS_KEY, "k3s.io/external-dns");
        }
        #[cfg(feature = "rke2")]
        {
            assert_eq!(PROGRAM, "rke2");
            assert_eq!(INTERNAL_IP_KEY, "rke2.io/internal-ip");
            assert_eq!(EXTERNAL_DNS_KEY, "rke2.io/external-dns");
        }
        assert_eq!(<K3s as Provider>::NAME, PROGRAM);
        for key in [EXTERNAL_IP_KEY, INTERNAL_DNS_KEY, HOSTNAME_KEY] {
            assert!(key.starts_with(&format!("{PROGRAM}.io/")), "{key}");
        }
    }

    #[test]
    fn initialize_reads_the_pools_and_tags_nothing() {
        let k3s = K3s::initialize(b"[Pools \"default\"]\ncidr = 10.0.0.0/29\n").unwrap();
        assert!(!k3s.has_cluster_id());
        assert_eq!(k3s.pools().namespaces(), ["default"]);
        // No cloud config: nodes only, no pool.
        assert!(
            K3s::initialize(b"")
                .unwrap()
                .pools()
                .namespaces()
                .is_empty()
        );
        let error = K3s::initialize(b"[Pools \"default\"]\ncidr = 10.0.0.0/33\n")
            .err()
            .unwrap();
        assert!(error.contains("line 2"), "{error}");
    }
}
