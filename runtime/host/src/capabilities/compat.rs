//! The imports of older contract versions, answered by the current capabilities.
//!
//! A frozen version's import interfaces are their own WIT interfaces (`logging@0.2.0`
//! is not `logging@0.3.0`), so bindgen makes them their own `Host` traits and enums.
//! Each impl here converts the enums case by case and calls the current capability:
//! an older component gets exactly what a current one gets. Contract 0.1's `logging`
//! is in [`super::logging`].

use super::HostState;
use crate::contract::v0_2;
use crate::contract::{annotations, cache, deadline, events, logging};

/// `From` both ways between a frozen version's enum or error variant and the current
/// one, case by case (unit cases; `too-large(u64)` is spelled out).
macro_rules! same_cases {
    ($old:path, $new:path { $($case:ident),* $(,)? }) => {
        impl From<$old> for $new {
            fn from(value: $old) -> Self {
                use $old as Old;
                match value { $(Old::$case => Self::$case),* }
            }
        }
        impl From<$new> for $old {
            fn from(value: $new) -> Self {
                use $new as New;
                match value { $(New::$case => Self::$case),* }
            }
        }
    };
}

same_cases!(
    v0_2::logging::Level,
    logging::Level {
        Trace,
        Debug,
        Info,
        Warn,
        Error
    }
);
same_cases!(
    v0_2::events::EventType,
    events::EventType { Normal, Warning }
);
same_cases!(
    v0_2::events::EventError,
    events::EventError {
        InvalidReason,
        NoObject,
        RateLimited
    }
);
same_cases!(
    v0_2::annotations::AnnotationError,
    annotations::AnnotationError {
        NotAllowed,
        TooLong,
        NoObject,
        TooMany
    }
);

impl From<cache::CacheError> for v0_2::cache::CacheError {
    fn from(value: cache::CacheError) -> Self {
        match value {
            cache::CacheError::InvalidKey => Self::InvalidKey,
            cache::CacheError::TooLarge(bytes) => Self::TooLarge(bytes),
        }
    }
}

impl v0_2::logging::Host for HostState {
    async fn log(
        &mut self,
        level: v0_2::logging::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) {
        logging::Host::log(self, level.into(), message, fields).await
    }
}

impl v0_2::cache::Host for HostState {
    async fn get(&mut self, key: String) -> Option<Vec<u8>> {
        cache::Host::get(self, key).await
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), v0_2::cache::CacheError> {
        cache::Host::set(self, key, value, ttl_ms)
            .await
            .map_err(Into::into)
    }

    async fn delete(&mut self, key: String) {
        cache::Host::delete(self, key).await
    }
}

impl v0_2::events::Host for HostState {
    async fn emit(
        &mut self,
        event_type: v0_2::events::EventType,
        reason: String,
        message: String,
        node: Option<String>,
    ) -> Result<(), v0_2::events::EventError> {
        events::Host::emit(self, event_type.into(), reason, message, node)
            .await
            .map_err(Into::into)
    }
}

impl v0_2::deadline::Host for HostState {
    async fn remaining_ms(&mut self) -> u64 {
        deadline::Host::remaining_ms(self).await
    }
}

impl v0_2::annotations::Host for HostState {
    async fn set(
        &mut self,
        key: String,
        value: String,
    ) -> Result<(), v0_2::annotations::AnnotationError> {
        annotations::Host::set(self, key, value)
            .await
            .map_err(Into::into)
    }
}

/// Adds every older version's imports to `linker`: 0.1's `logging` and `types`, 0.2's
/// `logging`, `cache`, `events`, `deadline`, `annotations` and `types`.
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<HostState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    crate::contract::v0_1::logging::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    crate::contract::v0_1::types::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    v0_2::logging::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    v0_2::cache::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    v0_2::events::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    v0_2::deadline::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    v0_2::annotations::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    // `types` has no function: its instance only has to exist.
    linker.instance(v0_2::TYPES)?;
    Ok(())
}
