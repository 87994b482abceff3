//! Temporary AWS credentials from STS `AssumeRoleWithWebIdentity` (EKS IRSA): the
//! projected service-account token exchanged by the host, the answer cached until
//! shortly before it expires, a failed exchange held for a moment.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;

use super::super::Confinement;
use super::super::login::{FAILURE_HOLD, read_capped, refresh_time, transport_reason};
use super::AwsError;
use crate::policy::aws::WebIdentity;
/// The longest an STS exchange may take.
const STS_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest STS response read.
const MAX_STS_RESPONSE_BYTES: usize = 64 << 10;

/// The temporary credentials of one web identity, shared by every rule naming it.
pub struct WebIdentityKeys {
    web: WebIdentity,
    confinement: Arc<Confinement>,
    state: tokio::sync::Mutex<Exchange>,
}

#[derive(Default)]
struct Exchange {
    current: Option<Temporary>,
    failed: Option<(Instant, String)>,
}

struct Temporary {
    credentials: Credentials,
    refresh_at: SystemTime,
}

impl Temporary {
    /// Not expired yet.
    fn still_valid(&self) -> bool {
        self.credentials
            .expiry()
            .is_some_and(|expiry| SystemTime::now() < expiry)
    }
}

/// Web identities by their settings, so rules naming the same one share its keys.
pub type WebIdentities = HashMap<WebIdentity, Arc<WebIdentityKeys>>;

impl WebIdentityKeys {
    /// The keys of `web`, its token file read through `confinement`; none yet.
    pub(super) fn new(web: &WebIdentity, confinement: &Arc<Confinement>) -> Self {
        Self {
            web: web.clone(),
            confinement: confinement.clone(),
            state: tokio::sync::Mutex::new(Exchange::default()),
        }
    }

    /// Puts `credentials`, due for renewal at `refresh_at`, in use (tests).
    #[cfg(test)]
    pub(super) async fn set_current(&self, credentials: Credentials, refresh_at: SystemTime) {
        self.state.lock().await.current = Some(Temporary {
            credentials,
            refresh_at,
        });
    }

    /// The current temporary credentials, exchanged again when they are close to
    /// expiring. One exchange at a time; a failure is held for [`FAILURE_HOLD`].
    pub(super) async fn credentials(
        &self,
        client: &reqwest::Client,
    ) -> Result<Credentials, AwsError> {
        let mut state = self.state.lock().await;
        if let Some(current) = &state.current
            && SystemTime::now() < current.refresh_at
        {
            return Ok(current.credentials.clone());
        }
        if let Some((at, reason)) = &state.failed
            && at.elapsed() < FAILURE_HOLD
        {
            // Renewal failed a moment ago: keep using credentials that are still valid.
            if let Some(current) = state.current.as_ref().filter(|c| c.still_valid()) {
                return Ok(current.credentials.clone());
            }
            return Err(self.sts_error(reason.clone()));
        }
        match self.exchange(client).await {
            Ok(temporary) => {
                let credentials = temporary.credentials.clone();
                tracing::info!(
                    role = %self.web.role_arn,
                    endpoint = %self.web.sts_endpoint,
                    "obtained temporary AWS credentials with the web-identity token"
                );
                state.current = Some(temporary);
                state.failed = None;
                Ok(credentials)
            }
            Err(AwsError::Sts { reason, .. }) => {
                state.failed = Some((Instant::now(), reason.clone()));
                // Credentials still valid (refresh is early) keep serving.
                if let Some(current) = state.current.as_ref().filter(|c| c.still_valid()) {
                    tracing::warn!(role = %self.web.role_arn, %reason, "renewing temporary AWS credentials failed; using the current ones until they expire");
                    return Ok(current.credentials.clone());
                }
                Err(self.sts_error(reason))
            }
            Err(other) => Err(other),
        }
    }

    fn sts_error(&self, reason: String) -> AwsError {
        AwsError::Sts {
            endpoint: self.web.sts_endpoint.to_string(),
            role: self.web.role_arn.clone(),
            reason,
        }
    }

    /// One `AssumeRoleWithWebIdentity` call (unsigned: the token is the proof).
    async fn exchange(&self, client: &reqwest::Client) -> Result<Temporary, AwsError> {
        let token = self.confinement.read_trimmed(&self.web.token_file)?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("Action", "AssumeRoleWithWebIdentity")
            .append_pair("Version", "2011-06-15")
            .append_pair("RoleArn", &self.web.role_arn)
            .append_pair("RoleSessionName", &self.web.session_name)
            .append_pair("WebIdentityToken", &token)
            .finish();
        let requested = SystemTime::now();
        let response = client
            .post(self.web.sts_endpoint.clone())
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded; charset=utf-8",
            )
            .header(http::header::ACCEPT, "text/xml")
            .body(form)
            .timeout(STS_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.sts_error(transport_reason(&e)))?;
        let status = response.status();
        let body = read_capped(response, MAX_STS_RESPONSE_BYTES)
            .await
            .map_err(|e| self.sts_error(e))?;
        let text = String::from_utf8_lossy(&body);
        let parsed = parse_sts_response(&text).map_err(|e| {
            self.sts_error(if status.is_success() {
                e
            } else {
                format!("HTTP {status}: {e}")
            })
        })?;
        let refresh_at = refresh_time(requested, parsed.expiration);
        Ok(Temporary {
            credentials: Credentials::new(
                parsed.access_key_id,
                parsed.secret_access_key,
                Some(parsed.session_token),
                Some(parsed.expiration),
                "wasm-ccm-web-identity",
            ),
            refresh_at,
        })
    }
}

/// What an `AssumeRoleWithWebIdentityResponse` holds.
pub(super) struct StsCredentials {
    pub(super) access_key_id: String,
    pub(super) secret_access_key: String,
    pub(super) session_token: String,
    pub(super) expiration: SystemTime,
}

/// Reads an `AssumeRoleWithWebIdentityResponse`, or the `ErrorResponse` STS sent.
pub(super) fn parse_sts_response(text: &str) -> Result<StsCredentials, String> {
    let doc =
        roxmltree::Document::parse(text).map_err(|e| format!("the response is not XML ({e})"))?;
    let element = |name: &str| {
        doc.descendants()
            .find(|n| n.is_element() && n.tag_name().name() == name)
            .and_then(|n| n.text())
            .map(str::trim)
    };
    if let Some(code) = element("Code") {
        let message = element("Message").unwrap_or_default();
        return Err(format!("{code}: {message}"));
    }
    let field = |name: &str| {
        element(name)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("the response has no {name}"))
    };
    let expiration = field("Expiration")?;
    let expiration = aws_smithy_types::DateTime::from_str(
        &expiration,
        aws_smithy_types::date_time::Format::DateTime,
    )
    .ok()
    .and_then(|t| SystemTime::try_from(t).ok())
    .ok_or_else(|| format!("Expiration `{expiration}` is not a date-time"))?;
    Ok(StsCredentials {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: field("SessionToken")?,
        expiration,
    })
}
