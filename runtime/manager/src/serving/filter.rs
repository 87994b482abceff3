//! The secure port's filter, in upstream's order: authenticate (client certificate,
//! bearer token, else anonymous), then authorize; 401 when a credential is not
//! valid, 403 when the user may not, 500 when the API server could not be asked.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::authn::{AuthnError, TokenAuthenticator, UserInfo};
use super::authz::{Authorizer, AuthzError, Decision};
use super::listener::Peer;
use super::tls::TlsState;

/// Delegated authentication and authorization.
pub struct Delegated {
    /// Bearer tokens.
    pub tokens: TokenAuthenticator,
    /// Paths.
    pub authorizer: Authorizer,
    /// The client certificate authorities, to verify each request's certificate.
    pub tls: Arc<TlsState>,
}

/// Too many reviews in flight: upstream's 429 answer.
fn busy() -> Response {
    status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        "Too many requests, please try again later.",
    )
}

/// Lets the request through when its user may use its method on its path. Only an
/// authenticated client's connection is kept alive: an anonymous one (the kubelet's
/// probes never reuse theirs) or a refused one is closed after the answer
/// (`Connection: close`), so nobody unauthenticated holds a connection between requests.
pub async fn guard(
    State(delegated): State<Arc<Delegated>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    request: Request,
    next: Next,
) -> Response {
    let (authenticated, mut response) = answer(&delegated, &peer, request, next).await;
    if !authenticated {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

/// The answer to `request`, and whether its client authenticated.
async fn answer(
    delegated: &Delegated,
    peer: &Peer,
    request: Request,
    next: Next,
) -> (bool, Response) {
    let path = request.uri().path().to_owned();
    let unauthorized = || status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    // A client certificate first, verified against the current authorities (the
    // connection's handshake may predate a change); one that no longer verifies is
    // refused, one without a Common Name leaves the token to decide, as upstream.
    let mut user = None;
    if let Some(certificate) = &peer.certificate {
        if !delegated.tls.verify_client(&certificate.chain) {
            tracing::debug!(peer = %peer.addr, %path, "client certificate no longer verifies");
            return (false, unauthorized());
        }
        user = certificate.user.clone();
    }
    let (authenticated, user) = match user {
        Some(user) => (true, user),
        None => match bearer_token(request.headers()) {
            Some(token) => match delegated.tokens.authenticate(token, peer.addr.ip()).await {
                Ok(user) => (true, user),
                Err(AuthnError::Busy) => return (false, busy()),
                Err(err) => {
                    tracing::debug!(peer = %peer.addr, %path, error = %err, "unauthorized");
                    return (false, unauthorized());
                }
            },
            None => (false, UserInfo::anonymous()),
        },
    };
    let verb = request.method().as_str().to_ascii_lowercase();
    let response = match delegated
        .authorizer
        .authorize(&user, &verb, &path, peer.addr.ip())
        .await
    {
        Ok(Decision::Allow) => next.run(request).await,
        Ok(Decision::Deny(reason)) => {
            tracing::debug!(peer = %peer.addr, user = %user.name, %verb, %path, %reason, "forbidden");
            let mut message = format!(
                "forbidden: User {:?} cannot {verb} path {path:?}",
                user.name
            );
            if !reason.is_empty() {
                message.push_str(": ");
                message.push_str(&reason);
            }
            status(StatusCode::FORBIDDEN, "Forbidden", &message)
        }
        Err(AuthzError::Busy) => busy(),
        Err(err) => {
            tracing::warn!(%path, error = %err, "cannot authorize a request to the secure port");
            status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("Internal Server Error: {path:?}"),
            )
        }
    };
    (authenticated, response)
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive), if any.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A `Status` object, as the API server and upstream's filters answer.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_as_upstream_reads_them() {
        let headers = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, value.parse().unwrap());
            h
        };
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
