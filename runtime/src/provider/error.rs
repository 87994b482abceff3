//! Errors of provider loading and provider calls.

use std::path::PathBuf;
use std::time::Duration;

use crate::bindings::types as wit;

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
    RetryAfter { delay: Duration, message: String },
    /// Any other failure reported by the provider.
    #[error("{0}")]
    Other(String),
}

impl From<wit::CloudError> for CloudError {
    fn from(e: wit::CloudError) -> Self {
        match e {
            wit::CloudError::InstanceNotFound => Self::InstanceNotFound,
            wit::CloudError::NotImplemented => Self::NotImplemented,
            wit::CloudError::ImplementedElsewhere => Self::ImplementedElsewhere,
            wit::CloudError::RetryAfter(r) => Self::RetryAfter {
                delay: Duration::from_millis(r.delay_ms),
                message: r.message,
            },
            wit::CloudError::Other(m) => Self::Other(m),
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
}

impl TrapKind {
    /// A label for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            TrapKind::Deadline => "deadline",
            TrapKind::Unreachable => "unreachable",
            TrapKind::StackOverflow => "stack_overflow",
            TrapKind::Fault => "fault",
            TrapKind::Host => "host",
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
        provider: String,
        function: &'static str,
        #[source]
        error: CloudError,
    },
    /// The instance trapped; it was discarded and will be replaced.
    #[error("{provider}: {function}: provider trapped ({}): {message}", kind.as_str())]
    Trap {
        provider: String,
        function: &'static str,
        kind: TrapKind,
        message: String,
    },
    /// The call did not finish within the provider's `limits.callTimeout`.
    #[error("{provider}: {function}: no answer within {after:?}; the instance was discarded")]
    Timeout {
        provider: String,
        function: &'static str,
        after: Duration,
    },
    /// A fresh instance could not be created.
    #[error("{provider}: cannot create an instance: {source}")]
    Instantiate {
        provider: String,
        #[source]
        source: wasmtime::Error,
    },
    /// A fresh instance's `initialize` failed.
    #[error("{provider}: initialize failed: {message}")]
    Initialize { provider: String, message: String },
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
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not WebAssembly at all.
    #[error("{path}: not a WebAssembly file (no `\\0asm` header)")]
    NotWasm { path: PathBuf },
    /// The file is a core module, not a component.
    #[error(
        "{path}: a core WebAssembly module, not a component; build the provider with \
         `cargo build --target wasm32-wasip2` or `cargo component build`"
    )]
    CoreModule { path: PathBuf },
    /// wasmtime could not compile or validate the component.
    #[error("{path}: invalid component: {source}")]
    Compile {
        path: PathBuf,
        #[source]
        source: wasmtime::Error,
    },
    /// The component exports nothing from the provider package: it targets another world.
    #[error(
        "{path}: not a wasm-ccm provider: it exports nothing from {package} (exports: {exports})",
        package = crate::bindings::PACKAGE,
        exports = display_list(.exports)
    )]
    OtherWorld { path: PathBuf, exports: Vec<String> },
    /// The component was built against an incompatible version of the provider package.
    #[error(
        "{path}: built against {found}, but this host implements {package}@{version}",
        package = crate::bindings::PACKAGE,
        version = crate::bindings::PACKAGE_VERSION
    )]
    IncompatibleVersion { path: PathBuf, found: String },
    /// The required `identity` export is missing.
    #[error(
        "{path}: does not export the required interface {package}/identity@{version} (exports: {exports})",
        package = crate::bindings::PACKAGE,
        version = crate::bindings::PACKAGE_VERSION,
        exports = display_list(.exports)
    )]
    MissingIdentity { path: PathBuf, exports: Vec<String> },
    /// An exported interface does not have the functions or types of the contract.
    #[error("{path}: export `{interface}` does not match the contract: {source}")]
    InterfaceMismatch {
        path: PathBuf,
        interface: String,
        #[source]
        source: wasmtime::Error,
    },
    /// The component imports something the host does not provide.
    #[error("{path}: imports {} which the host does not provide ({source})", display_list(.imports))]
    UnsupportedImport {
        path: PathBuf,
        imports: Vec<String>,
        #[source]
        source: wasmtime::Error,
    },
    /// Instantiating the component failed (start function trapped, limits...).
    #[error("{path}: cannot instantiate: {source}")]
    Instantiate {
        path: PathBuf,
        #[source]
        source: wasmtime::Error,
    },
    /// `provider-name` or `initialize` failed.
    #[error("{path}: {source}")]
    Initialize {
        path: PathBuf,
        #[source]
        source: ProviderError,
    },
    /// The provider's egress could not be set up (e.g. its CA bundle is unreadable).
    #[error("{path}: {source}")]
    Egress {
        path: PathBuf,
        #[source]
        source: crate::capabilities::http_egress::BrokerError,
    },
    /// The policy file next to the component is invalid.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
}

impl LoadError {
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
            Self::Initialize { .. } => "initialize",
            Self::Egress { .. } => "egress",
            Self::Policy(_) => "policy",
        }
    }
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
