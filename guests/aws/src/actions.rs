//! The AWS API actions this provider may call, declared once: `guests/aws/iam-policy.json`
//! is the IAM policy users grant (the README shows it, `deploy/aws/` and the moto tests
//! use it). [`Api::call`](crate::api::Api::call) refuses an action the policy does not
//! list before any request is made, so an action added to the code but not to the
//! policy fails every test that reaches it instead of failing a user's cluster.

use std::sync::OnceLock;

/// The IAM policy document.
pub const IAM_POLICY: &str = include_str!("../iam-policy.json");

/// `service:Action` names the policy allows (e.g. `ec2:DescribeInstances`).
pub fn declared() -> &'static [String] {
    static ACTIONS: OnceLock<Vec<String>> = OnceLock::new();
    ACTIONS.get_or_init(|| {
        let policy: serde_json::Value =
            serde_json::from_str(IAM_POLICY).expect("iam-policy.json is JSON");
        policy["Statement"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["Action"].as_array().into_iter().flatten())
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect()
    })
}

/// Whether the policy allows `action` of `service` (`ec2`, `elasticloadbalancing`).
pub fn allowed(service: &str, action: &str) -> bool {
    declared()
        .iter()
        .any(|a| a.split_once(':') == Some((service, action)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_lists_actions_by_service() {
        assert!(allowed("ec2", "DescribeInstances"));
        assert!(allowed("elasticloadbalancing", "DescribeTags"));
        assert!(!allowed("ec2", "TerminateInstances"));
        assert!(!allowed("elasticloadbalancing", "DescribeInstances"));
        assert!(declared().iter().all(|a| !a.contains('*')), "no wildcards");
    }
}
