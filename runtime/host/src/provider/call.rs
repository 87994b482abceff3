//! One call into a pooled instance, written once for every WIT function: borrow an
//! instance, arm the deadline and the call's objects, call the component's version of
//! the function inside a `provider_call` span, settle (metrics, return or discard the
//! instance).

/// Calls a WIT function on a pooled instance of a provider.
///
/// - `guest_call!(handle.0, "function", about OBJECTS, |guests, store| { current => CALL,
///   v0_1 => CALL })` inside a handle's `impl` (the interface is `Self::INTERFACE`) for
///   a function returning `result<_, cloud-error>`. `CALL` for `current` serves 0.3 and
///   0.2 components alike (0.2's records are the current ones); the 0.1 call's answer is
///   converted with [`Adapt`](crate::contract::v0_1::Adapt), and `v0_1 => unsupported`
///   marks a function 0.1 components never export;
/// - `guest_call!(infallible provider, "interface", "function", about OBJECTS, ...)` for
///   a function that cannot return a cloud error;
/// - `guest_call!(infallible provider, "interface", "function", about OBJECTS, |g, store|
///   { since_v0_3 => CALL })` for a function older components do not have (the caller
///   checks the version first).
///
/// `OBJECTS` are the Kubernetes objects the call is about (events land on them).
macro_rules! guest_call {
    ($provider:expr, $function:literal, about $about:expr, |$g:ident, $store:ident| {
        current => $current:expr, v0_1 => unsupported $(,)?
    }) => {
        $crate::provider::call::guest_call!(@body $provider, Self::INTERFACE.wit_name(), $function, $about,
            |$g, $store, deadline| $current, [same], [unsupported],
            |r: Result<_, $crate::contract::types::CloudError>| r.map_err($crate::provider::CloudError::from))
    };
    ($provider:expr, $function:literal, about $about:expr, |$g:ident, $store:ident| {
        current => $current:expr, v0_1 => $old:expr $(,)?
    }) => {
        $crate::provider::call::guest_call!(@body $provider, Self::INTERFACE.wit_name(), $function, $about,
            |$g, $store, deadline| $current, [same], [fallible $old],
            |r: Result<_, $crate::contract::types::CloudError>| r.map_err($crate::provider::CloudError::from))
    };
    (infallible $provider:expr, $interface:literal, $function:literal, about $about:expr, |$g:ident, $store:ident| {
        since_v0_3 => $current:expr $(,)?
    }) => {
        $crate::provider::call::guest_call!(@body $provider, $interface, $function, $about,
            |$g, $store, deadline| $current, [unsupported], [unsupported],
            Ok::<_, std::convert::Infallible>)
    };
    (infallible $provider:expr, $interface:literal, $function:literal, about $about:expr, |$g:ident, $store:ident| {
        current => $current:expr, v0_1 => $old:expr $(,)?
    }) => {
        $crate::provider::call::guest_call!(@body $provider, $interface, $function, $about,
            |$g, $store, deadline| $current, [same], [infallible $old],
            Ok::<_, std::convert::Infallible>)
    };
    (@v0_2 $deadline:ident, [same], $current:expr, $wrap:expr) => {
        tokio::time::timeout($deadline, $current).await.map(|r| r.map($wrap))
    };
    (@v0_2 $deadline:ident, [unsupported], $current:expr, $wrap:expr) => {
        // Never reached: the caller checks the version first.
        Ok(Err(wasmtime::Error::msg("not part of contract 0.2")))
    };
    (@old $deadline:ident, [unsupported]) => {
        // Never reached: 0.1 components do not export the interface, so no handle exists.
        Ok(Err(wasmtime::Error::msg("not part of contract 0.1")))
    };
    (@old $deadline:ident, [fallible $old:expr]) => {
        tokio::time::timeout($deadline, $old).await.map(|r| {
            r.map(|r: Result<_, $crate::contract::v0_1::types::CloudError>| {
                r.map($crate::contract::v0_1::Adapt::adapt).map_err(|e| {
                    $crate::provider::CloudError::from($crate::contract::v0_1::Adapt::<
                        $crate::contract::types::CloudError,
                    >::adapt(e))
                })
            })
        })
    };
    (@old $deadline:ident, [infallible $old:expr]) => {
        tokio::time::timeout($deadline, $old).await.map(|r| {
            r.map(|v| Ok::<_, std::convert::Infallible>($crate::contract::v0_1::Adapt::adapt(v)))
        })
    };
    (@body $provider:expr, $interface:expr, $function:literal, $about:expr,
        |$g:ident, $store:ident, $deadline:ident| $current:expr, [$($v02:tt)+], [$($old:tt)+], $wrap:expr) => {{
        use tracing::Instrument as _;
        let provider: &$crate::provider::Provider = $provider;
        let interface: &'static str = $interface;
        let span = tracing::debug_span!(
            "provider_call",
            provider = provider.name(),
            interface,
            function = $function
        );
        let about: Vec<$crate::capabilities::ObjectRef> = $about;
        async move {
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
                let ($store, guests, $deadline) = lease.arm(about);
                match guests {
                    $crate::provider::Guests::V0_3($g) => {
                        tokio::time::timeout($deadline, $current).await.map(|r| r.map($wrap))
                    }
                    #[allow(unused_variables)]
                    $crate::provider::Guests::V0_2($g) => {
                        $crate::provider::call::guest_call!(@v0_2 $deadline, [$($v02)+], $current, $wrap)
                    }
                    #[allow(unused_variables)]
                    $crate::provider::Guests::V0_1($g) => {
                        $crate::provider::call::guest_call!(@old $deadline, [$($old)+])
                    }
                }
            };
            lease.settle(interface, $function, started, outcome)
        }
        .instrument(span)
        .await
    }};
}

pub(crate) use guest_call;
