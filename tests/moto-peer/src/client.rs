//! The signed Query-protocol client: the services it calls and SigV4-signed calls
//! with the test's keys or others.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

use crate::{Keys, Moto, REGION};

/// A service the client calls.
#[derive(Debug, Clone, Copy)]
pub enum Service {
    Ec2,
    /// Classic Elastic Load Balancing.
    Elb,
    Elbv2,
    Iam,
    Sts,
}

impl Service {
    fn signing_name(self) -> &'static str {
        match self {
            Service::Ec2 => "ec2",
            Service::Elb | Service::Elbv2 => "elasticloadbalancing",
            Service::Iam => "iam",
            Service::Sts => "sts",
        }
    }

    fn version(self) -> &'static str {
        match self {
            Service::Ec2 => "2016-11-15",
            Service::Elb => "2012-06-01",
            Service::Elbv2 => "2015-12-01",
            Service::Iam => "2010-05-08",
            Service::Sts => "2011-06-15",
        }
    }
}

impl Moto {
    /// Calls `action` signed with `keys`; the answer's text, or the error's.
    pub async fn call_as(
        &self,
        keys: &Keys,
        service: Service,
        action: &str,
        params: &[(&str, &str)],
    ) -> Result<String, String> {
        let body = {
            let mut body = url::form_urlencoded::Serializer::new(String::new());
            body.append_pair("Action", action)
                .append_pair("Version", service.version());
            for (k, v) in params {
                body.append_pair(k, v);
            }
            body.finish()
        };
        let url = format!("{}/", self.url());
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        // Signed in a block of its own: the signer's values are not `Send`, so none may
        // live across an await (the playground's kubelets call this from a spawned task).
        let request = {
            let identity: Identity = Credentials::new(
                &keys.id,
                &keys.secret,
                keys.session_token.clone(),
                None,
                "test",
            )
            .into();
            let params = v4::SigningParams::builder()
                .identity(&identity)
                .region(REGION)
                .name(service.signing_name())
                .time(SystemTime::now())
                .settings(SigningSettings::default())
                .build()
                .unwrap()
                .into();
            let headers = [("content-type", content_type)];
            let signable = SignableRequest::new(
                "POST",
                &url,
                headers.into_iter(),
                SignableBody::Bytes(body.as_bytes()),
            )
            .unwrap();
            let (instructions, _) = sign(signable, &params).unwrap().into_parts();
            let mut request = self
                .client
                .post(&url)
                .header("content-type", content_type)
                .body(body.clone());
            for (name, value) in instructions.headers() {
                request = request.header(name, value);
            }
            request
        };
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let text = response.text().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(text)
        } else {
            Err(format!("{action}: HTTP {status}: {text}"))
        }
    }

    /// Calls `action` with the test's keys; the answer's text, or the error's.
    pub async fn try_call(
        &self,
        service: Service,
        action: &str,
        params: &[(&str, &str)],
    ) -> Result<String, String> {
        self.call_as(&self.keys, service, action, params).await
    }

    /// Calls `action` with the test's keys; panics on errors.
    pub async fn call(&self, service: Service, action: &str, params: &[(&str, &str)]) -> String {
        self.try_call(service, action, params)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}
