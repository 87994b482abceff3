//! What a component file is, before anything runs: header sniffing, and which of the
//! provider contract's interfaces it exports and which host capabilities it imports.

use std::path::Path;

use wasmtime::Engine;
use wasmtime::component::Component;

use super::error::LoadError;
use super::{Exports, Interface};
use crate::contract::{PACKAGE, Version};

/// Interfaces the host links, by package prefix (any version of these WASI packages
/// within 0.2 is accepted by wasmtime's semver matching).
const HOST_WASI_IMPORTS: [&str; 8] = [
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:cli/",
    "wasi:filesystem/",
    "wasi:sockets/",
    "wasi:http/types@",
    "wasi:http/outgoing-handler@",
];

/// The result of [`sniff`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WasmKind {
    /// A component (layer 1).
    Component,
    /// A core module (layer 0), which cannot be a provider.
    CoreModule,
}

/// Tells a component from a core module from something else by the 8-byte header.
pub fn sniff(path: &Path, bytes: &[u8]) -> Result<WasmKind, LoadError> {
    if bytes.len() < 8 || &bytes[0..4] != b"\0asm" {
        return Err(LoadError::NotWasm {
            path: path.to_owned(),
        });
    }
    // Core modules have version 1 and layer 0; components have layer 1.
    match bytes[6..8] {
        [0, 0] => Ok(WasmKind::CoreModule),
        [1, 0] => Ok(WasmKind::Component),
        _ => Err(LoadError::NotWasm {
            path: path.to_owned(),
        }),
    }
}

/// Names a component exports and imports.
#[derive(Debug, Clone)]
pub struct Surface {
    /// Fully qualified export names.
    pub exports: Vec<String>,
    /// Fully qualified import names.
    pub imports: Vec<String>,
}

impl Surface {
    /// The surface of a compiled component.
    pub fn of(engine: &Engine, component: &Component) -> Self {
        let ty = component.component_type();
        Self {
            exports: ty.exports(engine).map(|(n, _)| n.to_owned()).collect(),
            imports: ty.imports(engine).map(|(n, _)| n.to_owned()).collect(),
        }
    }

    /// Imports the host does not link.
    pub fn unsupported_imports(&self) -> Vec<String> {
        self.imports
            .iter()
            .filter(|name| !is_host_import(name))
            .cloned()
            .collect()
    }

    /// Checks the exports against the contract: one supported package version,
    /// `identity` present. Returns that version and the optional interfaces found (a
    /// 0.1 component's `load-balancer` carries `get-load-balancer-name`, so it counts as
    /// exporting `load-balancer-name` too).
    pub fn check_exports(&self, path: &Path) -> Result<(Version, Exports), LoadError> {
        let ours: Vec<&String> = self
            .exports
            .iter()
            .filter(|n| n.starts_with(&format!("{PACKAGE}/")))
            .collect();
        if ours.is_empty() {
            return Err(LoadError::OtherWorld {
                path: path.to_owned(),
                exports: self.exports.clone(),
            });
        }
        let version_of = |name: &str| name.rsplit_once('@').map(|(_, v)| v.to_owned());
        let first = version_of(ours[0]);
        let version = first.as_deref().and_then(Version::parse);
        let mixed = ours.iter().any(|n| version_of(n) != first);
        let version = match version {
            Some(version) if !mixed => version,
            _ => {
                let found: std::collections::BTreeSet<String> = ours
                    .iter()
                    .map(|n| version_of(n).unwrap_or_else(|| "unversioned".into()))
                    .collect();
                return Err(LoadError::IncompatibleVersion {
                    path: path.to_owned(),
                    found: found
                        .into_iter()
                        .map(|v| format!("{PACKAGE}@{v}"))
                        .collect::<Vec<_>>()
                        .join(" and "),
                });
            }
        };
        // Imports of a later version than the exports: the component mixes contracts.
        let later: Vec<&String> = self
            .imports
            .iter()
            .filter(|n| n.starts_with(&format!("{PACKAGE}/")))
            .filter(|n| {
                version_of(n)
                    .as_deref()
                    .and_then(Version::parse)
                    .is_some_and(|v| v > version)
            })
            .collect();
        if let Some(import) = later.first() {
            return Err(LoadError::IncompatibleVersion {
                path: path.to_owned(),
                found: format!("exports of {version} and the import {import}"),
            });
        }
        let has = |name: &str| self.exports.contains(&version.interface_name(name));
        if !has("identity") {
            return Err(LoadError::MissingIdentity {
                path: path.to_owned(),
                version,
                exports: self.exports.clone(),
            });
        }
        let mut exports: Exports = Interface::ALL
            .iter()
            .copied()
            .filter(|i| has(i.wit_name()))
            .collect();
        if version == Version::V0_1 && exports.contains(Interface::LoadBalancer) {
            exports = exports.with(Interface::LoadBalancerName);
        }
        Ok((version, exports))
    }
}

/// The host's own imports, each with the first contract version that has it (later
/// versions keep it).
const CONTRACT_IMPORTS: [(&str, Version); 7] = [
    ("logging", Version::V0_1),
    ("types", Version::V0_1),
    ("cache", Version::V0_2),
    ("events", Version::V0_2),
    ("deadline", Version::V0_2),
    ("annotations", Version::V0_2),
    ("services", Version::V0_3),
];

fn is_host_import(name: &str) -> bool {
    if name.starts_with(&format!("{PACKAGE}/")) {
        return Version::ALL.iter().any(|v| {
            CONTRACT_IMPORTS
                .iter()
                .any(|(i, since)| v >= since && name == v.interface_name(i))
        });
    }
    name == crate::capabilities::http_client::INTERFACE
        || HOST_WASI_IMPORTS.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn surface(exports: &[&str], imports: &[&str]) -> Surface {
        Surface {
            exports: exports.iter().map(|s| s.to_string()).collect(),
            imports: imports.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn sniff_tells_components_from_modules() {
        let p = Path::new("x.wasm");
        assert_eq!(sniff(p, b"\0asm\x01\0\0\0").unwrap(), WasmKind::CoreModule);
        assert_eq!(sniff(p, b"\0asm\x0d\0\x01\0").unwrap(), WasmKind::Component);
        assert!(matches!(
            sniff(p, b"garbage!"),
            Err(LoadError::NotWasm { .. })
        ));
        assert!(matches!(sniff(p, b"\0as"), Err(LoadError::NotWasm { .. })));
    }

    #[test]
    fn exports_are_classified() {
        let p = Path::new("x.wasm");
        let s = surface(
            &[
                "wasm-ccm:provider/identity@0.1.0",
                "wasm-ccm:provider/routes@0.1.0",
            ],
            &[],
        );
        let (version, e) = s.check_exports(p).unwrap();
        assert_eq!(version, Version::V0_1);
        assert_eq!(e.names(), vec!["routes"]);
        let (version, e) = surface(
            &[
                "wasm-ccm:provider/identity@0.2.0",
                "wasm-ccm:provider/instances-batch@0.2.0",
                "wasm-ccm:provider/load-balancer@0.2.0",
            ],
            &[],
        )
        .check_exports(p)
        .unwrap();
        assert_eq!(version, Version::V0_2);
        assert_eq!(e.names(), vec!["instances-batch", "load-balancer"]);
        let (_, e) = surface(
            &[
                "wasm-ccm:provider/identity@0.1.0",
                "wasm-ccm:provider/load-balancer@0.1.0",
            ],
            &[],
        )
        .check_exports(p)
        .unwrap();
        assert_eq!(e.names(), vec!["load-balancer", "load-balancer-name"]);
        assert!(matches!(
            surface(
                &[
                    "wasm-ccm:provider/identity@0.1.0",
                    "wasm-ccm:provider/routes@0.2.0"
                ],
                &[]
            )
            .check_exports(p),
            Err(LoadError::IncompatibleVersion { .. })
        ));
        assert!(matches!(
            surface(&["wasi:cli/run@0.2.0"], &[]).check_exports(p),
            Err(LoadError::OtherWorld { .. })
        ));
        assert!(matches!(
            surface(&["wasm-ccm:provider/zones@0.1.0"], &[]).check_exports(p),
            Err(LoadError::MissingIdentity { .. })
        ));
        assert!(matches!(
            surface(&["wasm-ccm:provider/identity@0.4.0"], &[]).check_exports(p),
            Err(LoadError::IncompatibleVersion { .. })
        ));
        // A 0.2 component cannot import what 0.3 brought.
        let err = surface(
            &["wasm-ccm:provider/identity@0.2.0"],
            &[
                "wasm-ccm:provider/services@0.3.0",
                "wasm-ccm:provider/cache@0.2.0",
            ],
        )
        .check_exports(p)
        .unwrap_err();
        assert!(err.to_string().contains("services@0.3.0"), "{err}");
        assert!(
            surface(
                &["wasm-ccm:provider/identity@0.3.0"],
                &["wasm-ccm:provider/services@0.3.0"]
            )
            .check_exports(p)
            .is_ok()
        );
    }

    #[test]
    fn unknown_imports_are_listed() {
        let s = surface(
            &[],
            &[
                "wasi:io/streams@0.2.6",
                "wasi:http/outgoing-handler@0.2.12",
                "wasm-ccm:provider/logging@0.1.0",
                "wasm-ccm:provider/cache@0.2.0",
                "wasm-ccm:provider/services@0.3.0",
                "wasm-ccm:http/client@0.1.0",
                "wasm-ccm:provider/services@0.2.0",
                "wasm-ccm:http/client@0.2.0",
                "wasm-ccm:provider/cache@0.1.0",
                "wasi:http/incoming-handler@0.2.12",
                "wasm-ccm:provider/instances@0.1.0",
                "acme:secrets/vault",
            ],
        );
        assert_eq!(
            s.unsupported_imports(),
            vec![
                "wasm-ccm:provider/services@0.2.0",
                "wasm-ccm:http/client@0.2.0",
                "wasm-ccm:provider/cache@0.1.0",
                "wasi:http/incoming-handler@0.2.12",
                "wasm-ccm:provider/instances@0.1.0",
                "acme:secrets/vault"
            ]
        );
    }
}
