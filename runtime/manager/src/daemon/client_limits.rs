//! The Kubernetes client's own limits, as upstream's flags set them on client-go:
//! `--kube-api-qps` and `--kube-api-burst` (a token bucket every API request waits
//! for, watches included) and `--kube-api-content-type`.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use tower_layer::Layer;
use tower_service::Service;
use wasm_ccm_host::capabilities::http_egress::rate_limit::TokenBucket;

/// The one content type the client speaks: Kubernetes' JSON (the types are
/// k8s-openapi's, which have no protobuf encoding).
pub const JSON: &str = "application/json";

/// The token bucket `--kube-api-qps`/`--kube-api-burst` describe, or `None` for no
/// client-side limit. As client-go: a QPS of 0 is the default 5, a negative QPS
/// disables the limit, and a positive QPS needs a burst of at least 1.
pub fn bucket(qps: f32, burst: i32) -> Result<Option<TokenBucket>, String> {
    let qps = if qps == 0.0 { 5.0 } else { qps };
    if qps < 0.0 {
        return Ok(None);
    }
    if burst < 1 {
        return Err(format!(
            "--kube-api-burst must be at least 1 when --kube-api-qps is positive (got {burst})"
        ));
    }
    Ok(Some(TokenBucket::new(
        f64::from(qps),
        f64::from(burst),
        Instant::now(),
    )))
}

/// Checks `--kube-api-content-type`.
pub fn content_type(value: &str) -> Result<(), String> {
    if value == JSON {
        return Ok(());
    }
    Err(format!(
        "--kube-api-content-type {value:?} is not supported: wasm-ccm speaks {JSON} to the API server"
    ))
}

/// A layer making every request of the client wait for a token.
#[derive(Clone)]
pub struct QpsLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl QpsLayer {
    /// Requests take tokens from `bucket`.
    pub fn new(bucket: TokenBucket) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(bucket)),
        }
    }
}

impl<S> Layer<S> for QpsLayer {
    type Service = Qps<S>;

    fn layer(&self, inner: S) -> Qps<S> {
        Qps {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            admitted: false,
        }
    }
}

/// The service [`QpsLayer`] makes: ready only once a token is taken, so requests wait
/// in the order the client sends them (the client serves its requests through one
/// buffer, which polls readiness before each).
pub struct Qps<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    admitted: bool,
}

impl<S, R> Service<R> for Qps<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.admitted {
            if let Some(wait) = self.wait.as_mut() {
                std::task::ready!(wait.as_mut().poll(cx));
                self.wait = None;
            }
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .try_take(Instant::now());
            match taken {
                Ok(()) => self.admitted = true,
                Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.admitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_as_client_go() {
        assert!(bucket(-1.0, 0).unwrap().is_none());
        assert!(bucket(0.0, 10).unwrap().is_some());
        assert!(bucket(20.0, 30).unwrap().is_some());
        let err = bucket(20.0, 0).err().unwrap();
        assert!(err.contains("--kube-api-burst"), "{err}");
        assert!(content_type("application/json").is_ok());
        let err = content_type("application/vnd.kubernetes.protobuf").unwrap_err();
        assert!(err.contains("not supported"), "{err}");
    }

    #[tokio::test]
    async fn requests_wait_for_tokens_after_the_burst() {
        use tower_service::Service as _;
        struct Echo;
        impl Service<u32> for Echo {
            type Response = u32;
            type Error = std::convert::Infallible;
            type Future = std::future::Ready<Result<u32, Self::Error>>;
            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Ok(()))
            }
            fn call(&mut self, r: u32) -> Self::Future {
                std::future::ready(Ok(r))
            }
        }
        let mut service = QpsLayer::new(bucket(100.0, 2).unwrap().unwrap()).layer(Echo);
        let started = std::time::Instant::now();
        for i in 0..6 {
            std::future::poll_fn(|cx| service.poll_ready(cx))
                .await
                .unwrap();
            assert_eq!(service.call(i).await.unwrap(), i);
        }
        // Two at once, then one every 10 ms: at least 40 ms for six (a lower bound,
        // which a slow machine only raises).
        let waited = started.elapsed();
        assert!(waited >= std::time::Duration::from_millis(35), "{waited:?}");
    }
}
