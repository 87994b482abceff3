//! `--feature-gates`, as Kubernetes components read it: `Name=true,Other=false`. Only
//! the gates this controller manager implements are known; any other name is refused
//! (as upstream refuses an unrecognized gate), so a gate is never silently ignored.

/// The gates wasm-ccm implements, with upstream's names and defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `CloudControllerManagerWatchBasedRoutesReconciliation` (upstream alpha since
    /// 1.35, off by default): the route controller reconciles when a Node is added or
    /// deleted or its pod CIDRs or addresses change, at most once per 10 s, instead of
    /// every `--route-reconciliation-period`.
    pub watch_based_routes: bool,
}

/// Upstream's name of [`FeatureGates::watch_based_routes`].
pub const WATCH_BASED_ROUTES: &str = "CloudControllerManagerWatchBasedRoutesReconciliation";

/// Parses `--feature-gates`: comma-separated `Name=bool` pairs (Go's booleans).
pub fn parse(text: &str) -> Result<FeatureGates, String> {
    let mut gates = FeatureGates::default();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("missing bool value for {pair}"))?;
        let value = crate::flags::parse_go_bool(value.trim())
            .map_err(|_| format!("invalid value of {name}={value}, err: not a bool"))?;
        match name.trim() {
            WATCH_BASED_ROUTES => gates.watch_based_routes = value,
            other => {
                return Err(format!(
                    "unrecognized feature gate: {other} (this controller manager knows \
                     {WATCH_BASED_ROUTES})"
                ));
            }
        }
    }
    Ok(gates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_are_read_as_kubernetes_reads_them() {
        assert_eq!(parse("").unwrap(), FeatureGates::default());
        assert!(
            parse("CloudControllerManagerWatchBasedRoutesReconciliation=true")
                .unwrap()
                .watch_based_routes
        );
        assert!(
            !parse("CloudControllerManagerWatchBasedRoutesReconciliation=false")
                .unwrap()
                .watch_based_routes
        );
        let unknown = parse("SomeOtherGate=true").unwrap_err();
        assert!(
            unknown.contains("unrecognized feature gate: SomeOtherGate"),
            "{unknown}"
        );
        assert!(parse("CloudControllerManagerWatchBasedRoutesReconciliation").is_err());
        assert!(parse("CloudControllerManagerWatchBasedRoutesReconciliation=maybe").is_err());
    }
}
