//! AWS Signature Version 4, computed by the host over the request the guest built.
//!
//! The guest builds an ordinary request (method, URL, headers, body); once its body
//! is buffered, the host signs it with the `aws-sigv4` crate — the AWS SDK's signer —
//! adding `Authorization`, `X-Amz-Date` and, for temporary keys,
//! `X-Amz-Security-Token`. The keys come from Secret files (re-read when rotated) or
//! from STS `AssumeRoleWithWebIdentity` (EKS IRSA): the host sends the projected
//! service-account token to the policy's STS endpoint and caches the temporary
//! credentials until shortly before they expire. Neither the keys, the session token
//! nor the web-identity token ever enter the guest, its logs or the metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::{Confinement, CredentialError, FileStamp};
use crate::policy::aws::{AwsCredential, AwsSource, WebIdentity};

/// Headers the host sets when it signs; a guest that sets one itself is refused.
pub const SIGNING_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// Temporary credentials are renewed this long before they expire (or after half
/// their lifetime, if that is shorter).
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);
/// After a failed STS exchange, requests fail with its error for this long instead
/// of each asking STS again.
const FAILURE_HOLD: Duration = Duration::from_secs(5);
/// The longest an STS exchange may take.
const STS_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest STS response read.
const MAX_STS_RESPONSE_BYTES: usize = 64 << 10;

/// Why a request could not be signed. Never contains a secret.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// The rule sets no service or region, and the host name does not imply them.
    #[error(
        "cannot tell the AWS signing service and region for `{0}`: set `service` and `region` in the credential rule"
    )]
    NoScope(String),
    /// A Secret file (keys or web-identity token) could not be read.
    #[error(transparent)]
    File(#[from] CredentialError),
    /// STS did not exchange the web-identity token.
    #[error("STS AssumeRoleWithWebIdentity at {endpoint} for {role}: {reason}")]
    Sts {
        /// The STS endpoint.
        endpoint: String,
        /// The role asked for.
        role: String,
        /// STS's error code and message, or the transport error.
        reason: String,
    },
    /// A header of the request is not text, or the signer refused the request.
    #[error("cannot sign the request: {0}")]
    Sign(String),
}

/// Signs requests for one credential rule.
pub struct AwsSigner {
    credential: AwsCredential,
    keys: Keys,
}

impl std::fmt::Debug for AwsSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSigner")
            .field("service", &self.credential.service)
            .field("region", &self.credential.region)
            .finish_non_exhaustive()
    }
}

enum Keys {
    Static {
        confinement: Arc<Confinement>,
        cache: Mutex<Option<(Vec<FileStamp>, Credentials)>>,
    },
    WebIdentity(Arc<WebIdentityKeys>),
}

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

/// Web identities by their settings, so rules naming the same one share its keys.
pub type WebIdentities = HashMap<WebIdentity, Arc<WebIdentityKeys>>;

impl AwsSigner {
    /// A signer for `credential`, reading files through `confinement`.
    pub fn new(
        credential: &AwsCredential,
        confinement: &Arc<Confinement>,
        shared: &mut WebIdentities,
    ) -> Self {
        let keys = match &credential.source {
            AwsSource::Static { .. } => Keys::Static {
                confinement: confinement.clone(),
                cache: Mutex::new(None),
            },
            AwsSource::WebIdentity(web) => Keys::WebIdentity(
                shared
                    .entry(web.clone())
                    .or_insert_with(|| {
                        Arc::new(WebIdentityKeys {
                            web: web.clone(),
                            confinement: confinement.clone(),
                            state: tokio::sync::Mutex::new(Exchange::default()),
                        })
                    })
                    .clone(),
            ),
        };
        Self {
            credential: credential.clone(),
            keys,
        }
    }

    /// Signs the request in place: adds `Authorization`, `X-Amz-Date` and, for
    /// temporary keys, `X-Amz-Security-Token` to `headers`. `url` and `headers` are
    /// exactly what is sent (no `Host`: the signer takes it from the URL, as the
    /// client sends it).
    pub async fn sign(
        &self,
        method: &Method,
        url: &url::Url,
        headers: &mut HeaderMap,
        body: &[u8],
        client: &reqwest::Client,
    ) -> Result<(), AwsError> {
        let host = url.host_str().unwrap_or_default();
        let (service, region) = self
            .credential
            .scope_for(host)
            .ok_or_else(|| AwsError::NoScope(host.to_owned()))?;
        let credentials = match &self.keys {
            Keys::Static { confinement, cache } => self.static_keys(confinement, cache)?,
            Keys::WebIdentity(keys) => keys.credentials(client).await?,
        };
        let identity: Identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&region)
            .name(&service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| AwsError::Sign(e.to_string()))?
            .into();
        let mut text = Vec::with_capacity(headers.len());
        for (name, value) in headers.iter() {
            let value = value
                .to_str()
                .map_err(|_| AwsError::Sign(format!("header `{name}` is not text")))?;
            text.push((name.as_str(), value));
        }
        let request = SignableRequest::new(
            method.as_str(),
            url.as_str(),
            text.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| AwsError::Sign(e.to_string()))?;
        let (instructions, _signature) = sign(request, &params)
            .map_err(|e| AwsError::Sign(e.to_string()))?
            .into_parts();
        let (add, query) = instructions.into_parts();
        debug_assert!(query.is_empty(), "signatures go in headers");
        for header in add {
            let mut value = HeaderValue::from_str(header.value()).map_err(|_| {
                AwsError::Sign(format!("`{}` is not a header value", header.name()))
            })?;
            value.set_sensitive(header.sensitive() || header.name() == "authorization");
            headers.insert(HeaderName::from_static(header.name()), value);
        }
        Ok(())
    }

    /// Static keys, re-read when a file changed.
    fn static_keys(
        &self,
        confinement: &Confinement,
        cache: &Mutex<Option<(Vec<FileStamp>, Credentials)>>,
    ) -> Result<Credentials, CredentialError> {
        let AwsSource::Static {
            access_key_id_file,
            secret_access_key_file,
            session_token_file,
        } = &self.credential.source
        else {
            unreachable!("static keys come from a static source")
        };
        let stamps = self
            .credential
            .files()
            .into_iter()
            .map(FileStamp::of)
            .collect::<Result<Vec<_>, _>>()?;
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((cached, credentials)) = cache.as_ref()
            && *cached == stamps
        {
            return Ok(credentials.clone());
        }
        let session_token = session_token_file
            .as_deref()
            .map(|f| confinement.read_trimmed(f))
            .transpose()?;
        let credentials = Credentials::new(
            confinement.read_trimmed(access_key_id_file)?,
            confinement.read_trimmed(secret_access_key_file)?,
            session_token,
            None,
            "wasm-ccm-secret-files",
        );
        *cache = Some((stamps, credentials.clone()));
        Ok(credentials)
    }
}

impl WebIdentityKeys {
    /// The current temporary credentials, exchanged again when they are close to
    /// expiring. One exchange at a time; a failure is held for [`FAILURE_HOLD`].
    async fn credentials(&self, client: &reqwest::Client) -> Result<Credentials, AwsError> {
        let mut state = self.state.lock().await;
        if let Some(current) = &state.current
            && SystemTime::now() < current.refresh_at
        {
            return Ok(current.credentials.clone());
        }
        if let Some((at, reason)) = &state.failed
            && at.elapsed() < FAILURE_HOLD
        {
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
                if let Some(current) = &state.current
                    && current
                        .credentials
                        .expiry()
                        .is_some_and(|expiry| SystemTime::now() < expiry)
                {
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
        let body = read_capped(response).await.map_err(|e| self.sts_error(e))?;
        let text = String::from_utf8_lossy(&body);
        let parsed = parse_sts_response(&text).map_err(|e| {
            self.sts_error(if status.is_success() {
                e
            } else {
                format!("HTTP {status}: {e}")
            })
        })?;
        let lifetime = parsed
            .expiration
            .duration_since(requested)
            .unwrap_or_default();
        let refresh_at = parsed.expiration - REFRESH_BEFORE_EXPIRY.min(lifetime / 2);
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

/// A transport error with its causes (the STS endpoint's URL has no query to hide).
fn transport_reason(error: &reqwest::Error) -> String {
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    reason
}

async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_STS_RESPONSE_BYTES {
            return Err(format!(
                "response larger than {MAX_STS_RESPONSE_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

struct StsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    expiration: SystemTime,
}

/// Reads an `AssumeRoleWithWebIdentityResponse`, or the `ErrorResponse` STS sent.
fn parse_sts_response(text: &str) -> Result<StsCredentials, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_responses_and_errors_are_read() {
        let ok = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <SessionToken>token</SessionToken>
      <SecretAccessKey>secret</SecretAccessKey>
      <Expiration>2026-11-23T23:00:00Z</Expiration>
      <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"#;
        let Ok(parsed) = parse_sts_response(ok) else {
            panic!("a valid response")
        };
        assert_eq!(parsed.access_key_id, "ASIAEXAMPLE");
        assert_eq!(parsed.session_token, "token");
        assert_eq!(
            parsed
                .expiration
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            1_795_474_800
        );
        let error = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>Token expired</Message></Error><RequestId>1</RequestId></ErrorResponse>"#;
        assert_eq!(
            parse_sts_response(error).err().unwrap(),
            "InvalidIdentityToken: Token expired"
        );
        assert!(parse_sts_response("not xml").is_err());
        assert!(
            parse_sts_response("<A><Credentials><AccessKeyId>x</AccessKeyId></Credentials></A>")
                .err()
                .unwrap()
                .contains("Expiration")
        );
    }
}
