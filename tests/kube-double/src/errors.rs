//! API errors as `meta/v1` Status bodies with the real server's reasons and codes.

use serde_json::{Value, json};

/// An API error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub name: String,
    pub kind: String,
    /// `details.causes` of an Invalid error: (field, message).
    pub causes: Vec<(String, String)>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, kind: &str, name: &str, message: String) -> Self {
        Self {
            code,
            reason,
            message,
            name: name.into(),
            kind: kind.into(),
            causes: Vec::new(),
        }
    }

    pub fn not_found(plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            plural,
            name,
            format!("{plural} \"{name}\" not found"),
        )
    }

    pub fn already_exists(plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            plural,
            name,
            format!("{plural} \"{name}\" already exists"),
        )
    }

    pub fn conflict(plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            plural,
            name,
            format!(
                "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        )
    }

    /// A 422 Invalid; `detail` is `field: message` as the real server words it.
    pub fn invalid(kind: &str, name: &str, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        let mut err = Self::new(
            422,
            "Invalid",
            kind,
            name,
            format!("{kind} \"{name}\" is invalid: {detail}"),
        );
        let (field, message) = match detail.split_once(": ") {
            Some((field, message)) if !field.contains(' ') => {
                (field.to_owned(), message.to_owned())
            }
            _ => (String::new(), detail.clone()),
        };
        err.causes.push((field, message));
        err
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", "", "", message.into())
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", "", "", message.into())
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", "", "", message.into())
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            "",
            "",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type:?})"
            ),
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "", "", "Unauthorized".into())
    }

    /// The `Status` body.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !self.name.is_empty() || !self.kind.is_empty() {
            status["details"] = json!({"name": self.name, "kind": self.kind});
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|(field, message)| json!({"reason": "FieldValueInvalid", "message": message, "field": field}))
                .collect();
            status["details"]["causes"] = Value::Array(causes);
        }
        status
    }
}
