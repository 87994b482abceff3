//! One call into a pooled instance, written once for every WIT function: borrow an
//! instance, arm the deadline, call inside a `provider_call` span, settle (metrics,
//! return or discard the instance).

/// Calls a WIT function on a pooled instance of a provider.
///
/// - `guest_call!(handle.0, field, "function", |guest, store| call)` inside a handle's
///   `impl` (the interface is `Self::INTERFACE`; `field` picks its export handle) for a
///   function returning `result<_, cloud-error>`;
/// - `guest_call!(infallible provider, |guests| getter, "interface", "function",
///   |guest, store| call)` for a function that cannot return a cloud error.
macro_rules! guest_call {
    ($provider:expr, $field:ident, $function:literal, |$guest:ident, $store:ident| $call:expr) => {
        $crate::provider::call::guest_call!(@run
            $provider,
            Self::INTERFACE.wit_name(),
            $function,
            |g| g.$field.as_ref().expect("handles exist only for exported interfaces"),
            |r| r,
            |$guest, $store| $call
        )
    };
    (infallible $provider:expr, |$gv:ident| $getter:expr, $interface:expr, $function:literal, |$guest:ident, $store:ident| $call:expr) => {
        $crate::provider::call::guest_call!(@run
            $provider,
            $interface,
            $function,
            |$gv| $getter,
            |r: wasmtime::Result<_>| r.map(Ok::<_, std::convert::Infallible>),
            |$guest, $store| $call
        )
    };
    (@run $provider:expr, $interface:expr, $function:literal, |$gv:ident| $getter:expr, $wrap:expr, |$guest:ident, $store:ident| $call:expr) => {{
        use tracing::Instrument as _;
        let provider: &$crate::provider::Provider = $provider;
        let interface: &'static str = $interface;
        let span = tracing::debug_span!(
            "provider_call",
            provider = provider.name(),
            interface,
            function = $function
        );
        async {
            let started = std::time::Instant::now();
            let pool = provider.pool();
            let mut lease = match pool.acquire().await {
                Ok(lease) => lease,
                Err(err) => {
                    pool.record_unavailable(interface, $function, started);
                    return Err(err);
                }
            };
            let outcome = {
                let ($store, guests, deadline) = lease.arm();
                let $guest = {
                    let $gv: &$crate::contract::Guests = guests;
                    $getter
                };
                tokio::time::timeout(deadline, $call).await.map($wrap)
            };
            lease.settle(interface, $function, started, outcome)
        }
        .instrument(span)
        .await
    }};
}

pub(crate) use guest_call;
