//! Label values from the cloud's names, as occm makes them: a Node's zone and
//! instance type become label values (`topology.kubernetes.io/zone`,
//! `node.kubernetes.io/instance-type`), which Kubernetes restricts to 63 characters of
//! `[A-Za-z0-9_.-]` starting and ending alphanumeric. OpenStack names are free text
//! (`nova zone`, `m1 large (legacy)`).

/// The longest label value.
const MAX_LEN: usize = 63;

/// Whether `value` is a valid Kubernetes label value (occm's `isValidLabelValue`,
/// apimachinery's `IsValidLabelValue`).
pub fn is_valid_label_value(value: &str) -> bool {
    if value.is_empty() {
        return true;
    }
    let bytes = value.as_bytes();
    value.len() <= MAX_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// occm's `util.SanitizeLabel`: every run of other characters becomes `-`, leading
/// and trailing `-_.` are cut, and the value is cut at 63 characters. Where occm's cut
/// can leave a trailing `-` (an invalid value), the trailing `-_.` are cut again.
pub fn sanitize_label(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    let mut in_run = false;
    for c in input.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let trim = |s: &str| s.trim_matches(['-', '_', '.']).to_owned();
    let mut out = trim(&out);
    if out.len() > MAX_LEN {
        out.truncate(MAX_LEN);
        out = trim(&out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occm_sanitize_label_cases() {
        // occm's pkg/util TestSanitizeLabel, and names seen on clouds.
        assert_eq!(sanitize_label("nova"), "nova");
        assert_eq!(sanitize_label("nova zone"), "nova-zone");
        assert_eq!(sanitize_label("m1 large (legacy)"), "m1-large-legacy");
        assert_eq!(sanitize_label("  az@#1  "), "az-1");
        assert_eq!(sanitize_label("-_.zone._-"), "zone");
        assert_eq!(sanitize_label("zone/ä/b"), "zone-b");
        assert_eq!(sanitize_label(""), "");
        let long = format!("{}-x", "a".repeat(62));
        let cut = sanitize_label(&long);
        assert_eq!(cut, "a".repeat(62));
        assert!(is_valid_label_value(&cut));
        assert_eq!(sanitize_label(&"b".repeat(80)).len(), 63);
    }

    #[test]
    fn valid_label_values() {
        for ok in ["", "a", "m1.large", "zone_1-a", &"x".repeat(63)] {
            assert!(is_valid_label_value(ok), "{ok}");
        }
        for bad in [
            "nova zone",
            "-a",
            "a-",
            "a/b",
            "m1 large (legacy)",
            &"x".repeat(64),
        ] {
            assert!(!is_valid_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn a_sanitized_value_is_always_valid() {
        for input in [
            "nova zone",
            "((()))",
            "a--",
            "é",
            "x y z",
            &"é a".repeat(40),
        ] {
            assert!(is_valid_label_value(&sanitize_label(input)), "{input}");
        }
    }
}
