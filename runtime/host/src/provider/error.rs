//! Errors of provider loading and provider calls.

use std::path::PathBuf;
use std::time::Duration;

use crate::capabilities::logging::sanitize;
use crate::contract::types as wit;

/// Upstream's sentinel errors, as returned by a provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// `cloudprovider.InstanceNotFound`.
    #[error("instance not found")]
    InstanceNotFound,
    /// `cloudprovider.NotImplemented`.
    #[error("unimplemented")]
    NotImplemented,
    /// `cloudprovider.ImplementedElsewhere`.
    #[error("implemented by alternate to cloud provider")]
    ImplementedElsewhere,
    /// `api.RetryError`: try again after `delay`.
    #[error("{message} (retry after {delay:?})")]
    RetryAfter {
        /// How long to wait before the next attempt.
        delay: Duration,
        /// What the provider said.
        message: String,
    },
    /// Any other failure reported by the provider.
    #[error("{0}")]
    Other(String),
}

impl From<wit::CloudError> for CloudError {
    /// Guest messages are sanitized here, once: they reach logs, Events and metrics.
    fn from(e: wit::CloudError) -> Self {
        match e {
            wit::CloudError::InstanceNotFound => Self::InstanceNotFound,
            wit::CloudError::NotImplemented => Self::NotImplemented,
            wit::CloudError::ImplementedElsewhere => Self::ImplementedElsewhere,
            wit::CloudError::RetryAfter(r) => Self::RetryAfter {
                delay: Duration::from_millis(r.delay_ms),
                message: sanitize(&r.message),
            },
            wit::CloudError::Other(m) => Self::Other(sanitize(&m)),
        }
    }
}

/// How a guest instance died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrapKind {
    /// The per-call epoch deadline interrupted the guest.
    Deadline,
    /// The guest hit `unreachable` (a Rust panic or abort, including failed allocations).
    Unreachable,
    /// The guest exhausted its stack.
    StackOverflow,
    /// Out-of-bounds memory or table access, or another wasm trap.
    Fault,
    /// A host function failed in a way that traps the guest.
    Host,
    /// Not a trap: the call returned still holding host resources (requests,
    /// responses, bodies, fields), so the instance was discarded rather than reused.
    HeldResources,
}

impl TrapKind {
    /// Every kind.
    pub const ALL: [TrapKind; 6] = [
        TrapKind::Deadline,
        TrapKind::Unreachable,
        TrapKind::StackOverflow,
        TrapKind::Fault,
        TrapKind::Host,
        TrapKind::HeldResources,
    ];

    /// A label for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            TrapKind::Deadline => "deadline",
            TrapKind::Unreachable => "unreachable",
            TrapKind::StackOverflow => "stack_overflow",
            TrapKind::Fault => "fault",
            TrapKind::Host => "host",
            TrapKind::HeldResources => "held_resources",
        }
    }

    pub(crate) fn classify(err: &wasmtime::Error) -> Self {
        match err.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::Interrupt) => TrapKind::Deadline,
            Some(wasmtime::Trap::UnreachableCodeReached) => TrapKind::Unreachable,
            Some(wasmtime::Trap::StackOverflow) => TrapKind::StackOverflow,
            Some(_) => TrapKind::Fault,
            None => TrapKind::Host,
        }
    }
}

/// Why a call into a provider failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered with an error.
    #[error("{provider}: {function}: {error}")]
    Cloud {
        /// The provider's name.
        provider: String,
        /// The WIT function called.
        function: &'static str,
        /// What it answered.
        #[source]
        error: CloudError,
    },
    /// The instance trapped; it was discarded and will be replaced.
    #[error("{provider}: {function}: provider trapped ({}): {message}", kind.as_str())]
    Trap {
        /// The provider's name.
        provider: String,
        /// The WIT function called.
        function: &'static str,
        /// How it died.
        kind: TrapKind,
        /// wasmtime's description, with the guest backtrace when there is one.
        message: String,
    },
    /// The call did not finish within the provider's `limits.callTimeout`.
    #[error("{provider}: {function}: no answer within {after:?}; the instance was discarded")]
    Timeout {
        /// The provider's name.
        provider: String,
        /// The WIT function called.
        function: &'static str,
        /// The deadline that passed.
        after: Duration,
    },
    /// A fresh instance could not be created.
    #[error("{provider}: cannot create an instance: {source}")]
    Instantiate {
        /// The provider's name.
        provider: String,
        /// What wasmtime reported.
        #[source]
        source: wasmtime::Error,
    },
    /// A fresh instance's `initialize` failed.
    #[error("{provider}: initialize failed: {message}")]
    Initialize {
        /// The provider's name.
        provider: String,
        /// The error `initialize` returned.
        message: String,
    },
}

impl ProviderError {
    /// The cloud error, when the provider answered with one.
    pub fn cloud(&self) -> Option<&CloudError> {
        match self {
            ProviderError::Cloud { error, .. } => Some(error),
            _ => None,
        }
    }

    /// True only when the provider said the instance definitely does not exist.
    pub fn is_instance_not_found(&self) -> bool {
        matches!(self.cloud(), Some(CloudError::InstanceNotFound))
    }

    /// True when the provider does not implement the call.
    pub fn is_not_implemented(&self) -> bool {
        matches!(self.cloud(), Some(CloudError::NotImplemented))
    }

    /// The delay the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.cloud() {
            Some(CloudError::RetryAfter { delay, .. }) => Some(*delay),
            _ => None,
        }
    }
}

/// Why a provider file could not be loaded. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not WebAssembly at all.
    #[error("{path}: not a WebAssembly file (no `\\0asm` header)")]
    NotWasm {
        /// The file.
        path: PathBuf,
    },
    /// The file is a core module, not a component.
    #[error(
        "{path}: a core WebAssembly module, not a component; build the provider with \
         `cargo build --target wasm32-wasip2` or `cargo component build`"
    )]
    CoreModule {
        /// The file.
        path: PathBuf,
    },
    /// wasmtime could not compile or validate the component.
    #[error("{path}: invalid component: {source}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// What wasmtime reported.
        #[source]
        source: wasmtime::Error,
    },
    /// The component exports nothing from the provider package: it targets another world.
    #[error(
        "{path}: not a wasm-ccm provider: it exports nothing from {package} (exports: {exports})",
        package = crate::contract::PACKAGE,
        exports = display_list(.exports)
    )]
    OtherWorld {
        /// The file.
        path: PathBuf,
        /// Everything it exports.
        exports: Vec<String>,
    },
    /// The component was built against a version of the provider package this host
    /// does not load (or against several).
    #[error(
        "{path}: built against {found}, but this host loads {package}@{versions}",
        package = crate::contract::PACKAGE,
        versions = crate::contract::Version::ALL.map(|v| v.as_str()).join(" and @")
    )]
    IncompatibleVersion {
        /// The file.
        path: PathBuf,
        /// The package version it was built against.
        found: String,
    },
    /// The required `identity` export is missing.
    #[error(
        "{path}: does not export the required interface {package}/identity@{v} (exports: {exports})",
        package = crate::contract::PACKAGE,
        v = .version.as_str(),
        exports = display_list(.exports)
    )]
    MissingIdentity {
        /// The file.
        path: PathBuf,
        /// The contract version its other exports are of.
        version: crate::contract::Version,
        /// Everything it exports.
        exports: Vec<String>,
    },
    /// An exported interface does not have the functions or types of the contract.
    #[error("{path}: export `{interface}` does not match the contract: {source}")]
    InterfaceMismatch {
        /// The file.
        path: PathBuf,
        /// The interface, fully qualified.
        interface: String,
        /// What wasmtime found wrong.
        #[source]
        source: wasmtime::Error,
    },
    /// The component imports something the host does not provide.
    #[error("{path}: imports {} which the host does not provide ({source})", display_list(.imports))]
    UnsupportedImport {
        /// The file.
        path: PathBuf,
        /// The imports the host does not provide.
        imports: Vec<String>,
        /// What wasmtime reported.
        #[source]
        source: wasmtime::Error,
    },
    /// Instantiating the component failed (start function trapped, limits...).
    #[error("{path}: cannot instantiate: {source}")]
    Instantiate {
        /// The file.
        path: PathBuf,
        /// What wasmtime reported.
        #[source]
        source: wasmtime::Error,
    },
    /// `identity.declined-interfaces` named something the component does not export.
    #[error(
        "{path}: identity.declined-interfaces names `{name}`, which is not an optional interface \
         the component exports (it exports: {exports})"
    )]
    Declined {
        /// The file.
        path: PathBuf,
        /// The name as declined (sanitized).
        name: String,
        /// The optional interfaces it exports.
        exports: String,
    },
    /// `provider-name` or `initialize` failed.
    #[error("{path}: {source}")]
    Initialize {
        /// The file.
        path: PathBuf,
        /// The failed call.
        #[source]
        source: ProviderError,
    },
    /// The provider's egress could not be set up (e.g. its CA bundle is unreadable).
    #[error("{path}: {source}")]
    Egress {
        /// The file.
        path: PathBuf,
        /// Why the broker refused it.
        #[source]
        source: crate::capabilities::http_egress::BrokerError,
    },
    /// The policy file next to the component is invalid.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    /// The component declares another provider name than the one asked for.
    #[error("{path}: provider-name is {found:?}, but {expected:?} was asked for")]
    WrongName {
        /// The file.
        path: PathBuf,
        /// The name it declares.
        found: String,
        /// The name asked for.
        expected: String,
    },
    /// The component, its policy or the cloud config could not be read.
    #[error(transparent)]
    Source(#[from] super::source::SourceError),
    /// The component `NAME.source.yaml` names could not be pulled or verified.
    #[error(transparent)]
    Fetch(#[from] super::oci::OciError),
    /// The component lacks the signature its policy or `--provider-trusted-keys`
    /// requires, or carries one by another key.
    #[error(transparent)]
    Signature(#[from] super::signature::SignatureError),
}

impl LoadError {
    /// Every value [`Self::reason`] takes.
    pub const REASONS: [&'static str; 14] = [
        "read",
        "not_wasm",
        "core_module",
        "compile",
        "other_world",
        "incompatible_version",
        "missing_identity",
        "interface_mismatch",
        "unsupported_import",
        "instantiate",
        "initialize",
        "egress",
        "policy",
        "wrong_provider",
    ];

    /// A short, stable name of the failure, for metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::NotWasm { .. } => "not_wasm",
            Self::CoreModule { .. } => "core_module",
            Self::Compile { .. } => "compile",
            Self::OtherWorld { .. } => "other_world",
            Self::IncompatibleVersion { .. } => "incompatible_version",
            Self::MissingIdentity { .. } => "missing_identity",
            Self::InterfaceMismatch { .. } => "interface_mismatch",
            Self::UnsupportedImport { .. } => "unsupported_import",
            Self::Instantiate { .. } => "instantiate",
            Self::Initialize { .. } | Self::Declined { .. } => "initialize",
            Self::Egress { .. } => "egress",
            Self::Policy(_) => "policy",
            Self::Source(super::source::SourceError::Remote(err)) | Self::Fetch(err) => {
                err.reason()
            }
            Self::Source(_) => "read",
            Self::Signature(err) => err.reason(),
            Self::WrongName { .. } => "wrong_provider",
        }
    }
}

/// Why [`ProviderLoader::find`](super::ProviderLoader::find) found no provider to run.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// The providers directory cannot be read.
    #[error("cannot read providers directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// No component in the directory has the requested provider name.
    #[error("no provider named {name:?} in {dir} (found: {found})")]
    NotFound {
        /// The provider name asked for.
        name: String,
        /// The directory searched.
        dir: PathBuf,
        /// What the directory holds instead.
        found: String,
    },
    /// The component named after the provider failed to load.
    #[error(transparent)]
    Load(#[from] LoadError),
}

fn display_list(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

impl From<std::convert::Infallible> for CloudError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}
