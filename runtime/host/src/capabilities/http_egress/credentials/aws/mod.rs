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

mod web_identity;

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::files::{Confinement, CredentialError, FileStamp};
use super::{Applied, BoxFuture, CredentialKind, Outgoing};
use crate::policy::actions::{ActionDenied, AllowedActions};
use crate::policy::aws::{AwsCredential, AwsSource};
pub use web_identity::{WebIdentities, WebIdentityKeys};

/// Headers the host sets when it signs; a guest that sets one itself is refused.
pub const SIGNING_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// Why a request could not be signed. Never contains a secret.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// The host name implies no service the rule may sign for (or no region), and the
    /// rule sets none.
    #[error(
        "the credential rule does not sign for `{0}`: its service is not in the rule's `services` \
         (services that hand out credentials, such as STS and IAM, never are), or it has no region"
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

impl CredentialKind for AwsSigner {
    fn refuses_header(&self, name: &str) -> bool {
        SIGNING_HEADERS.contains(&name)
    }

    /// IAM action names of the service the request is signed for, read where that
    /// service reads them; a request signed for no service is refused when signing.
    fn check_actions(
        &self,
        actions: &AllowedActions,
        request: &Outgoing,
    ) -> Result<(), ActionDenied> {
        match self.service_for(&request.url, &request.headers) {
            Some(service) => {
                actions.check_aws(&service, &request.url, &request.headers, &request.body)
            }
            None => Ok(()),
        }
    }

    fn apply<'a>(
        &'a self,
        request: &'a mut Outgoing,
        client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<Applied, String>> {
        Box::pin(async move {
            let Outgoing {
                method,
                url,
                headers,
                body,
            } = request;
            self.sign(method, url, headers, body, client)
                .await
                .map(|()| None)
                .map_err(|e| e.to_string())
        })
    }
}

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
                    .or_insert_with(|| Arc::new(WebIdentityKeys::new(web, confinement)))
                    .clone(),
            ),
        };
        Self {
            credential: credential.clone(),
            keys,
        }
    }

    /// The service the request is signed for (as [`Self::sign`] will find it), if any.
    pub fn service_for(&self, url: &url::Url, headers: &HeaderMap) -> Option<String> {
        let named = headers
            .get(crate::policy::aws::SERVICE_HEADER)
            .map(|v| v.to_str().unwrap_or_default());
        self.credential
            .scope_for(url.host_str().unwrap_or_default(), named)
            .map(|(service, _)| service)
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
        // The service the provider names is the host's to read: never sent, never signed.
        let named = headers
            .remove(crate::policy::aws::SERVICE_HEADER)
            .map(|v| v.to_str().map(str::to_owned).unwrap_or_default());
        let (service, region) = self
            .credential
            .scope_for(host, named.as_deref())
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
        let stamps = FileStamp::of_all(self.credential.files())?;
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
impl super::BuildKind for AwsCredential {
    /// A signer; rules of one policy with the same web identity share its keys.
    fn build(
        &self,
        ctx: &mut super::BuildContext<'_>,
    ) -> Result<Arc<dyn super::CredentialKind>, super::CredentialError> {
        let confinement = ctx.confinement().clone();
        Ok(Arc::new(AwsSigner::new(
            self,
            &confinement,
            ctx.shared::<WebIdentities>(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::super::login::{REFRESH_BEFORE_EXPIRY, refresh_time};
    use super::web_identity::parse_sts_response;
    use super::*;
    use crate::policy::aws::WebIdentity;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// An STS double on 127.0.0.1 answering every request with `status` and `body`
    /// (`{EXPIRATION}` replaced), counting requests and keeping the last body.
    async fn sts_double(
        status: u16,
        body: String,
    ) -> (url::Url, Arc<AtomicUsize>, Arc<Mutex<String>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = url::Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let last = Arc::new(Mutex::new(String::new()));
        let (counter, seen) = (count.clone(), last.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Headers, then the form body (small: one read after the headers).
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&request).to_string();
                let length: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                let head = text.find("\r\n\r\n").map(|i| i + 4).unwrap_or(text.len());
                while request.len() < head + length {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                counter.fetch_add(1, Ordering::SeqCst);
                *seen.lock().unwrap() =
                    String::from_utf8_lossy(&request[head.min(request.len())..]).to_string();
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        (url, count, last)
    }

    fn credentials_xml(expiration: &str) -> String {
        format!(
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
             <AccessKeyId>ASIATEMP</AccessKeyId><SecretAccessKey>temp-secret</SecretAccessKey>\
             <SessionToken>temp-session</SessionToken><Expiration>{expiration}</Expiration>\
             </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
        )
    }

    fn web_identity_signer(dir: &Path, endpoint: url::Url) -> AwsSigner {
        std::fs::write(dir.join("token"), "projected-sa-token\n").unwrap();
        let credential = AwsCredential {
            region: Some("us-east-1".into()),
            service: Some("ec2".into()),
            services: Vec::new(),
            source: AwsSource::WebIdentity(WebIdentity {
                role_arn: "arn:aws:iam::123456789012:role/ccm".into(),
                token_file: dir.join("token"),
                sts_endpoint: endpoint,
                session_name: "wasm-ccm".into(),
            }),
            pinned: true,
        };
        let confinement = Arc::new(Confinement {
            dir: Some(std::fs::canonicalize(dir).unwrap()),
        });
        AwsSigner::new(&credential, &confinement, &mut WebIdentities::new())
    }

    fn temp(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-aws-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn client() -> reqwest::Client {
        super::super::super::install_crypto_provider();
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    async fn sign_once(signer: &AwsSigner) -> Result<HeaderMap, AwsError> {
        let url = url::Url::parse("https://ec2.us-east-1.amazonaws.com/").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        signer
            .sign(
                &Method::POST,
                &url,
                &mut headers,
                b"Action=DescribeInstances",
                &client(),
            )
            .await
            .map(|()| headers)
    }

    #[tokio::test]
    async fn web_identity_credentials_are_exchanged_once_and_sign_with_the_session_token() {
        let dir = temp("irsa");
        let (endpoint, count, last) =
            sts_double(200, credentials_xml("2999-01-01T00:00:00Z")).await;
        let signer = web_identity_signer(&dir, endpoint);
        let headers = sign_once(&signer).await.unwrap();
        let authorization = headers["authorization"].to_str().unwrap().to_owned();
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential=ASIATEMP/")
                && authorization.contains("/us-east-1/ec2/aws4_request"),
            "{authorization}"
        );
        assert!(headers["authorization"].is_sensitive());
        assert_eq!(headers["x-amz-security-token"], "temp-session");
        assert!(headers.contains_key("x-amz-date"));
        let form = last.lock().unwrap().clone();
        assert!(
            form.contains("Action=AssumeRoleWithWebIdentity")
                && form.contains("WebIdentityToken=projected-sa-token")
                && form.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fccm"),
            "{form}"
        );
        sign_once(&signer).await.unwrap();
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "cached until close to expiry"
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn expired_credentials_are_exchanged_again() {
        let dir = temp("irsa-expired");
        let (endpoint, count, _) = sts_double(200, credentials_xml("2001-01-01T00:00:00Z")).await;
        let signer = web_identity_signer(&dir, endpoint);
        sign_once(&signer).await.unwrap();
        sign_once(&signer).await.unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 2, "past their renewal time");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn renewal_is_five_minutes_early_or_half_way() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Duration::from_secs(3600);
        assert_eq!(
            refresh_time(t0, t0 + hour),
            t0 + hour - REFRESH_BEFORE_EXPIRY
        );
        let short = Duration::from_secs(60);
        assert_eq!(refresh_time(t0, t0 + short), t0 + short / 2);
        assert_eq!(refresh_time(t0, t0), t0);
    }

    #[tokio::test]
    async fn sts_errors_name_the_code_never_the_token_and_are_held() {
        let dir = temp("irsa-error");
        let (endpoint, count, _) = sts_double(
            400,
            "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>\
             <Message>No OpenIDConnect provider found</Message></Error></ErrorResponse>"
                .into(),
        )
        .await;
        let signer = web_identity_signer(&dir, endpoint);
        let error = sign_once(&signer).await.unwrap_err().to_string();
        assert!(
            error.contains("InvalidIdentityToken") && error.contains("role/ccm"),
            "{error}"
        );
        assert!(!error.contains("projected-sa-token"), "{error}");
        let again = sign_once(&signer).await.unwrap_err().to_string();
        assert_eq!(again, error);
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "a failure is held for a while"
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn a_failed_renewal_keeps_valid_credentials_in_use() {
        let dir = temp("irsa-renewal");
        let (endpoint, count, _) = sts_double(
            503,
            "<ErrorResponse><Error><Code>ServiceUnavailable</Code><Message>down</Message></Error></ErrorResponse>".into(),
        )
        .await;
        let signer = web_identity_signer(&dir, endpoint);
        let Keys::WebIdentity(keys) = &signer.keys else {
            panic!("web identity")
        };
        // Due for renewal, not expired.
        keys.set_current(
            Credentials::new(
                "ASIAOLD",
                "old-secret",
                Some("old-session".into()),
                Some(SystemTime::now() + Duration::from_secs(120)),
                "test",
            ),
            SystemTime::now() - Duration::from_secs(1),
        )
        .await;
        for _ in 0..3 {
            let headers = sign_once(&signer).await.unwrap();
            assert!(
                headers["authorization"]
                    .to_str()
                    .unwrap()
                    .contains("Credential=ASIAOLD/")
            );
        }
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "one renewal attempt, then held"
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn static_keys_are_re_read_when_rotated() {
        let dir = temp("static");
        std::fs::write(dir.join("id"), "AKIAFIRST\n").unwrap();
        std::fs::write(dir.join("secret"), "first-secret").unwrap();
        let credential = AwsCredential {
            region: None,
            service: None,
            services: vec!["ec2".into()],
            source: AwsSource::Static {
                access_key_id_file: dir.join("id"),
                secret_access_key_file: dir.join("secret"),
                session_token_file: None,
            },
            pinned: true,
        };
        let confinement = Arc::new(Confinement { dir: None });
        let signer = AwsSigner::new(&credential, &confinement, &mut WebIdentities::new());
        let headers = sign_once(&signer).await.unwrap();
        let authorization = headers["authorization"].to_str().unwrap();
        // Scope from the host name: ec2.us-east-1.amazonaws.com.
        assert!(
            authorization.contains("Credential=AKIAFIRST/")
                && authorization.contains("/us-east-1/ec2/"),
            "{authorization}"
        );
        assert!(!headers.contains_key("x-amz-security-token"));
        std::fs::write(dir.join("id.new"), "AKIASECOND").unwrap();
        std::fs::rename(dir.join("id.new"), dir.join("id")).unwrap();
        let headers = sign_once(&signer).await.unwrap();
        assert!(
            headers["authorization"]
                .to_str()
                .unwrap()
                .contains("Credential=AKIASECOND/")
        );
        std::fs::remove_dir_all(dir).ok();
    }

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
