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

    #[test]
    fn the_date_is_the_sdk_s_basic_format() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_136_214_245);
        assert_eq!(sdk_date(t), "20060102T150405Z");
        let fractional = t + std::time::Duration::from_millis(250);
        assert_eq!(sdk_date(fractional), "20060102T150405Z");
    }
}
