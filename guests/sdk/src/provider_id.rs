//! Provider IDs: `spec.providerID` is `<provider name>://<cloud-specific part>`.
//!
//! ```
//! use wasm_ccm_guest::provider_id;
//!
//! assert_eq!(provider_id::format("simcloud", "i-1"), "simcloud://i-1");
//! assert_eq!(provider_id::parse("simcloud", "simcloud://i-1"), Ok("i-1"));
//! // AWS writes `aws:///<zone>/<instance>`: the part after `://` is `/us-east-1a/i-1`.
//! assert_eq!(provider_id::parse("aws", "aws:///us-east-1a/i-1"), Ok("/us-east-1a/i-1"));
//! assert!(provider_id::parse("simcloud", "aws:///us-east-1a/i-1").is_err());
//! ```

use crate::types::CloudError;

/// `<name>://<id>`.
pub fn format(name: &str, id: &str) -> String {
    format!("{name}://{id}")
}

/// The part after `<name>://`; an error naming the expected form when the ID belongs
/// to another provider or has nothing after the scheme.
pub fn parse<'a>(name: &str, provider_id: &'a str) -> Result<&'a str, CloudError> {
    provider_id
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix("://"))
        .filter(|rest| !rest.is_empty())
        .ok_or_else(|| {
            CloudError::Other(format!(
                "provider ID {provider_id:?} is not of the form {name}://<id>"
            ))
        })
}

/// The last `/`-separated segment of the part after `<name>://` (the instance ID in
/// `aws:///us-east-1a/i-1` and in `simcloud://i-1`); an error when it is empty.
pub fn parse_last_segment<'a>(name: &str, provider_id: &'a str) -> Result<&'a str, CloudError> {
    let rest = parse(name, provider_id)?;
    match rest.rsplit('/').next() {
        Some(last) if !last.is_empty() => Ok(last),
        _ => Err(CloudError::Other(format!(
            "provider ID {provider_id:?} names no instance after {name}://"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_ids_are_errors() {
        assert!(parse("simcloud", "simcloud://").is_err());
        assert!(parse("simcloud", "simcloud:/i-1").is_err());
        assert!(parse("simcloud", "simcloudx://i-1").is_err());
        assert_eq!(
            parse_last_segment("aws", "aws:///us-east-1a/i-1"),
            Ok("i-1")
        );
        assert_eq!(parse_last_segment("aws", "aws://i-1"), Ok("i-1"));
        assert!(parse_last_segment("aws", "aws:///us-east-1a/").is_err());
    }
}
