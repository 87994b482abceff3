//! The `huaweicloud` kind: the host signs each request with the rule's access key as
//! Huawei Cloud's SDKs do ([`sign`]): `X-Sdk-Date`, `X-Project-Id` (the rule's),
//! `X-Security-Token` (temporary keys) and `Authorization: SDK-HMAC-SHA256 Access=..,
//! SignedHeaders=.., Signature=..`, over the exact request sent. The keys never reach
//! the guest, and the guest may set none of those headers.

mod sign;

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http::{HeaderName, HeaderValue};

use super::build::{BuildContext, BuildKind};
use super::files::{Confinement, CredentialError, FileStamp};
use super::{Applied, BoxFuture, CredentialKind, Outgoing};
use crate::policy::huaweicloud::HuaweiCloudCredential;

/// Headers the host sets when it signs; a guest that sets one itself is refused.
pub const SIGNING_HEADERS: [&str; 5] = [
    "authorization",
    "x-sdk-date",
    "x-security-token",
    "x-sdk-content-sha256",
    "x-project-id",
];

/// The keys, as read.
#[derive(Clone)]
struct Keys {
    access_key: String,
    secret_key: String,
    security_token: Option<String>,
}

/// One rule's signer.
pub struct HuaweiCloudSigner {
    credential: HuaweiCloudCredential,
    confinement: Arc<Confinement>,
    /// The keys, re-read when a file changed.
    cache: Mutex<Option<(Vec<FileStamp>, Keys)>>,
}

impl std::fmt::Debug for HuaweiCloudSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HuaweiCloudSigner")
            .field("services", &self.credential.services)
            .finish_non_exhaustive()
    }
}

impl BuildKind for HuaweiCloudCredential {
    fn build(
        &self,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Arc<dyn CredentialKind>, CredentialError> {
        Ok(Arc::new(HuaweiCloudSigner {
            credential: self.clone(),
            confinement: ctx.confinement().clone(),
            cache: Mutex::new(None),
        }))
    }
}

impl HuaweiCloudSigner {
    /// The keys, read again when one of their files changed.
    fn keys(&self) -> Result<Keys, CredentialError> {
        let stamps = FileStamp::of_all(self.credential.files())?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((cached, keys)) = cache.as_ref()
            && *cached == stamps
        {
            return Ok(keys.clone());
        }
        let keys = Keys {
            access_key: self
                .confinement
                .read_trimmed(&self.credential.access_key_id_file)?,
            secret_key: self
                .confinement
                .read_trimmed(&self.credential.secret_access_key_file)?,
            security_token: self
                .credential
                .security_token_file
                .as_deref()
                .map(|file| self.confinement.read_trimmed(file))
                .transpose()?,
        };
        *cache = Some((stamps, keys.clone()));
        Ok(keys)
    }

    /// Signs `request` in place.
    fn sign(&self, request: &mut Outgoing) -> Result<(), String> {
        let host = request.url.host_str().unwrap_or_default().to_owned();
        let service = self.credential.service_for(&host).ok_or_else(|| {
            format!(
                "{host} names no service the rule signs for ({}): the host signs only for them",
                self.credential.services.join(", ")
            )
        })?;
        let keys = self.keys().map_err(|e| e.to_string())?;
        let date = sdk_date(SystemTime::now());
        let authority = match request.url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.clone(),
        };
        let mut set = vec![("x-sdk-date", date.clone()), ("host", authority)];
        if let Some(project) = &self.credential.project_id {
            set.push(("x-project-id", project.clone()));
        }
        if let Some(token) = &keys.security_token {
            set.push(("x-security-token", token.clone()));
        }
        let mut signed: Vec<(String, String)> = set
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect();
        if let Some(content_type) = request
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
        {
            signed.push(("content-type".to_owned(), content_type.to_owned()));
        }
        let to_sign = sign::ToSign {
            method: request.method.as_str(),
            path: request.url.path(),
            query: request.url.query(),
            headers: &signed,
            body: &request.body,
            date: &date,
        };
        let authorization = sign::authorization(&to_sign, &keys.access_key, &keys.secret_key);
        for (name, value) in set {
            // `Host` goes as the client sends it, from the URL.
            if name == "host" {
                continue;
            }
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| format!("`{name}` is not a header value"))?;
            value.set_sensitive(name == "x-security-token");
            request.headers.insert(HeaderName::from_static(name), value);
        }
        let mut authorization = HeaderValue::from_str(&authorization)
            .map_err(|_| "the access key is not a header value".to_owned())?;
        authorization.set_sensitive(true);
        request
            .headers
            .insert(http::header::AUTHORIZATION, authorization);
        tracing::trace!(%service, "signed for Huawei Cloud");
        Ok(())
    }
}

impl CredentialKind for HuaweiCloudSigner {
    fn refuses_header(&self, name: &str) -> bool {
        SIGNING_HEADERS.contains(&name)
    }

    fn apply<'a>(
        &'a self,
        request: &'a mut Outgoing,
        _client: &'a reqwest::Client,
    ) -> BoxFuture<'a, Result<Applied, String>> {
        let signed = self.sign(request).map(|()| None);
        Box::pin(async move { signed })
    }

    fn observes(&self, status: http::StatusCode) -> bool {
        status == http::StatusCode::UNAUTHORIZED
    }

    fn answered(&self, status: http::StatusCode, headers: &http::HeaderMap, body: &[u8]) {
        let Some(skew) = expired_signature(status, headers, body, SystemTime::now()) else {
            return;
        };
        match skew {
            Some(seconds) => tracing::warn!(
                clock_skew_seconds = seconds,
                "Huawei Cloud refused the signature as expired: this host's clock is {}s {} \
                 the cloud's (its `Date`), and an `X-Sdk-Date` may be at most 15 minutes off; \
                 fix the node's time synchronization (NTP)",
                seconds.unsigned_abs(),
                if seconds < 0 { "ahead of" } else { "behind" },
            ),
            None => tracing::warn!(
                "Huawei Cloud refused the signature as expired (an `X-Sdk-Date` may be at most \
                 15 minutes off the cloud's time) and its answer has no `Date` to compare \
                 with: check the node's time synchronization (NTP)"
            ),
        }
    }
}

/// What API Gateway answers when a request's `X-Sdk-Date` is more than 15 minutes off
/// its own clock (`APIGW.0301`, "Incorrect IAM authentication information: calc ak sk
/// signature fail:signature expired").
const EXPIRED: &str = "signature expired";

/// For an answer refusing a signature as expired: the cloud's clock (the answer's
/// `Date`) minus `now`, in seconds, if the answer has a `Date`. `None` for any other
/// answer.
fn expired_signature(
    status: http::StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Option<Option<i64>> {
    if status != http::StatusCode::UNAUTHORIZED || !String::from_utf8_lossy(body).contains(EXPIRED)
    {
        return None;
    }
    let cloud = headers
        .get(http::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            aws_smithy_types::DateTime::from_str(v, aws_smithy_types::date_time::Format::HttpDate)
                .ok()
        });
    let now = aws_smithy_types::DateTime::from(now);
    Some(cloud.map(|cloud| cloud.secs() - now.secs()))
}

/// `X-Sdk-Date`: UTC `YYYYMMDDTHHMMSSZ`.
fn sdk_date(now: SystemTime) -> String {
    let iso = aws_smithy_types::DateTime::from(now)
        .fmt(aws_smithy_types::date_time::Format::DateTime)
        .unwrap_or_default();
    // `2006-01-02T15:04:05Z` (or with fractional seconds) to `20060102T150405Z`.
    let digits: String = iso
        .chars()
        .take_while(|c| *c != '.' && *c != 'Z')
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    format!("{digits}Z")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Credential, Policy};

    /// A signer for the rule `huaweicloud` (keys in files under a fresh directory).
    fn signer(dir: &std::path::Path, huaweicloud: &str) -> Arc<dyn CredentialKind> {
        let text = format!(
            "credentials:\n  - destination: https://*.ap-southeast-1.myhuaweicloud.com\n    \
             huaweicloud: {huaweicloud}\n"
        );
        let policy = Policy::parse(&text, &dir.join("p.yaml")).unwrap();
        let Credential::HuaweiCloud(rule) = &policy.credentials[0].credential else {
            panic!("a huaweicloud rule");
        };
        let sessions = super::super::Sessions::new(
            crate::metrics::ProviderLabel::new("test"),
            crate::metrics::Metrics::new().provider().clone(),
        );
        let confinement = Arc::new(Confinement { dir: None });
        let mut ctx = BuildContext::new(&confinement, &sessions);
        rule.build(&mut ctx).unwrap()
    }

    fn outgoing(url: &str, body: &str) -> Outgoing {
        let mut headers = http::HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        Outgoing {
            method: http::Method::POST,
            url: url::Url::parse(url).unwrap(),
            headers,
            body: bytes::Bytes::from(body.to_owned()),
        }
    }

    /// What a verifier computes from the request as sent: the signed headers named in
    /// `Authorization`, with the values sent (`host` from the URL).
    fn verify(request: &Outgoing, secret_key: &str) -> bool {
        let authorization = request.headers["authorization"].to_str().unwrap();
        let part = |key: &str| {
            authorization
                .split(", ")
                .find_map(|p| p.split_once(&format!("{key}=")).map(|(_, v)| v.to_owned()))
                .unwrap()
        };
        let headers: Vec<(String, String)> = part("SignedHeaders")
            .split(';')
            .map(|name| {
                let value = match name {
                    "host" => request.url.host_str().unwrap().to_owned(),
                    _ => request.headers[name].to_str().unwrap().to_owned(),
                };
                (name.to_owned(), value)
            })
            .collect();
        let date = request.headers["x-sdk-date"].to_str().unwrap();
        let to_sign = sign::ToSign {
            method: request.method.as_str(),
            path: request.url.path(),
            query: request.url.query(),
            headers: &headers,
            body: &request.body,
            date,
        };
        part("Signature") == sign::signature(&to_sign, secret_key)
    }

    /// Signed over what is sent, with the project and a temporary key's token; the keys
    /// read again once their files change; no signature for a host whose service the
    /// rule does not name; none of the signing headers may come from the provider.
    #[tokio::test]
    async fn requests_are_signed_as_sent_and_rotated_keys_are_used() {
        let dir = std::env::temp_dir().join(format!("wasm-ccm-hwc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ak"), "AK1").unwrap();
        std::fs::write(dir.join("sk"), "SK1").unwrap();
        std::fs::write(dir.join("token"), "T1").unwrap();
        let kind = signer(
            &dir,
            "{accessKeyIdFile: ak, secretAccessKeyFile: sk, securityTokenFile: token, \
             projectId: p0123}",
        );
        super::super::super::install_crypto_provider();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let url =
            "https://ecs.ap-southeast-1.myhuaweicloud.com/v1/p0123/cloudservers/action?limit=1&a=b";
        let mut request = outgoing(url, r#"{"os-stop": {}}"#);
        kind.apply(&mut request, &client).await.unwrap();
        assert!(verify(&request, "SK1"), "{:?}", request.headers);
        let authorization = request.headers["authorization"].to_str().unwrap();
        assert!(
            authorization.starts_with("SDK-HMAC-SHA256 Access=AK1, "),
            "{authorization}"
        );
        assert!(
            authorization.contains(
                "SignedHeaders=content-type;host;x-project-id;x-sdk-date;x-security-token,"
            ),
            "{authorization}"
        );
        assert_eq!(request.headers["x-project-id"], "p0123");
        assert_eq!(request.headers["x-security-token"], "T1");
        assert!(request.headers["authorization"].is_sensitive());
        // A byte of the body changed: the signature no longer holds.
        let mut tampered = request.clone();
        tampered.body = bytes::Bytes::from_static(br#"{"os-start": {}}"#);
        assert!(!verify(&tampered, "SK1"));

        // Rotated (a new file, as a Secret's update writes one).
        std::fs::write(dir.join("ak.new"), "AK2").unwrap();
        std::fs::rename(dir.join("ak.new"), dir.join("ak")).unwrap();
        std::fs::write(dir.join("sk.new"), "SK2-longer").unwrap();
        std::fs::rename(dir.join("sk.new"), dir.join("sk")).unwrap();
        let mut again = outgoing(url, "{}");
        kind.apply(&mut again, &client).await.unwrap();
        assert!(verify(&again, "SK2-longer"));
        assert!(
            again.headers["authorization"]
                .to_str()
                .unwrap()
                .contains("Access=AK2,")
        );

        let mut iam = outgoing(
            "https://iam.ap-southeast-1.myhuaweicloud.com/v3/auth/tokens",
            "{}",
        );
        let refused = kind.apply(&mut iam, &client).await.unwrap_err();
        assert!(
            refused.contains("names no service the rule signs for"),
            "{refused}"
        );
        assert!(!iam.headers.contains_key("authorization"));
        for header in SIGNING_HEADERS {
            assert!(kind.refuses_header(header), "{header}");
        }
        assert!(!kind.refuses_header("content-type"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A 401 saying the signature expired gives the cloud's clock minus ours, from the
    /// answer's `Date`; other answers give nothing.
    #[test]
    fn an_expired_signature_is_measured_against_the_answer_s_date() {
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_136_214_245);
        let mut headers = http::HeaderMap::new();
        // 20 minutes after `now` (2006-01-02T15:04:05Z).
        headers.insert(
            "date",
            HeaderValue::from_static("Mon, 02 Jan 2006 15:24:05 GMT"),
        );
        let body = br#"{"error_msg":"Incorrect IAM authentication information: calc ak sk signature fail:signature expired","error_code":"APIGW.0301","request_id":"r"}"#;
        let unauthorized = http::StatusCode::UNAUTHORIZED;
        assert_eq!(
            expired_signature(unauthorized, &headers, body, now),
            Some(Some(1200))
        );
        assert_eq!(
            expired_signature(unauthorized, &http::HeaderMap::new(), body, now),
            Some(None)
        );
        let other = br#"{"error_msg":"Incorrect IAM authentication information: verify aksk signature fail","error_code":"APIGW.0301"}"#;
        assert_eq!(expired_signature(unauthorized, &headers, other, now), None);
        assert_eq!(
            expired_signature(http::StatusCode::FORBIDDEN, &headers, body, now),
            None
        );
    }

    #[test]
    fn the_date_is_the_sdk_s_basic_format() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_136_214_245);
        assert_eq!(sdk_date(t), "20060102T150405Z");
        let fractional = t + std::time::Duration::from_millis(250);
        assert_eq!(sdk_date(fractional), "20060102T150405Z");
    }
}
