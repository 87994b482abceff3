//! Which subnet of the floating network a new floating IP comes from, as occm's
//! `floatingSubnetSpec` (`loadbalancer_subnet_match.go`): a subnet ID, or a name
//! pattern and tags, from the Service's `[LoadBalancerClass]`, else its annotations
//! (`floating-subnet-id`, else `floating-subnet` and `floating-subnet-tags`), else the
//! cloud config's `[LoadBalancer]`.
//!
//! - **Name pattern** (`floating-subnet`): a glob (`*`, `?`, `{a,b}`), or a regular
//!   expression after `~`; a leading `!` matches the names that do not match. The
//!   pattern matches the whole name.
//! - **Tags** (`floating-subnet-tags`): `a,b` any of them, `&a,b` all of them; a
//!   leading `!` negates. Neutron filters by them, with the query occm sends
//!   (`tags-any`, `tags`, `not-tags`, `not-tags-any`).
//!
//! With a pattern or tags, the matching subnets are tried in Neutron's order until one
//! gives a floating IP (occm's `getOrCreateFloatingIP`); the Service's
//! `loadBalancerIP`, when set, is asked for without a subnet.

use regex_lite::Regex;

/// The floating subnet a Service asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct FloatingSubnet {
    /// `floating-subnet-id`.
    pub(super) id: String,
    /// `floating-subnet`: a name pattern (when no ID is given).
    pub(super) name: String,
    /// `floating-subnet-tags` (when no ID is given).
    pub(super) tags: String,
}

impl FloatingSubnet {
    /// The spec of one source (a class, the annotations, the cloud config): the ID,
    /// else the pattern and tags.
    pub(super) fn new(id: &str, name: &str, tags: &str) -> Self {
        let (id, name, tags) = (id.trim(), name.trim(), tags.trim());
        if id.is_empty() {
            FloatingSubnet {
                id: String::new(),
                name: name.to_owned(),
                tags: tags.to_owned(),
            }
        } else {
            FloatingSubnet {
                id: id.to_owned(),
                ..Default::default()
            }
        }
    }

    /// Says anything (occm's `Configured`).
    pub(super) fn configured(&self) -> bool {
        !self.id.is_empty() || self.matches_by_pattern()
    }

    /// Chosen by a name pattern or tags rather than an ID (occm's `matcherConfigured`).
    pub(super) fn matches_by_pattern(&self) -> bool {
        self.id.is_empty() && (!self.name.is_empty() || !self.tags.is_empty())
    }

    /// Neutron's subnet list filter for the tags, as occm's `tweakListOpts` asks.
    pub(super) fn tag_query(&self) -> Option<(&'static str, String)> {
        if self.tags.is_empty() {
            return None;
        }
        let (rest, not) = match self.tags.strip_prefix('!') {
            Some(rest) => (rest, true),
            None => (self.tags.as_str(), false),
        };
        let (rest, all) = match rest.strip_prefix('&') {
            Some(rest) => (rest, true),
            None => (rest, false),
        };
        let list: Vec<&str> = rest
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        let key = match (all, not) {
            (true, false) => "tags",
            (true, true) => "not-tags-any",
            (false, true) => "not-tags",
            (false, false) => "tags-any",
        };
        Some((key, list.join(",")))
    }

    /// The name matcher, or an error naming the bad pattern.
    pub(super) fn name_matcher(&self) -> Result<Option<NameMatcher>, String> {
        if self.name.is_empty() {
            return Ok(None);
        }
        let (pattern, negate) = match self.name.strip_prefix('!') {
            Some(rest) => (rest, true),
            None => (self.name.as_str(), false),
        };
        let expression = match pattern.strip_prefix('~') {
            Some(regexp) => regexp.to_owned(),
            None => glob_expression(pattern),
        };
        let regex = Regex::new(&format!("^(?:{expression})$"))
            .map_err(|e| format!("floating subnet pattern `{}` is invalid: {e}", self.name))?;
        Ok(Some(NameMatcher { regex, negate }))
    }
}

impl std::fmt::Display for FloatingSubnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        for (what, value) in [
            ("subnet ID", &self.id),
            ("name pattern", &self.name),
            ("tags", &self.tags),
        ] {
            if !value.is_empty() {
                parts.push(format!("{what} `{value}`"));
            }
        }
        f.write_str(&parts.join(", "))
    }
}

/// Matches subnet names against a `floating-subnet` pattern.
#[derive(Debug)]
pub(super) struct NameMatcher {
    regex: Regex,
    negate: bool,
}

impl NameMatcher {
    pub(super) fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name) != self.negate
    }
}

/// A glob as a regular expression: `*` any run of characters but `/`, `?` one of
/// them, `{a,b}` either; everything else literal.
fn glob_expression(glob: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in glob.chars() {
        match c {
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            '{' => {
                depth += 1;
                out.push_str("(?:");
            }
            '}' if depth > 0 => {
                depth -= 1;
                out.push(')');
            }
            ',' if depth > 0 => out.push('|'),
            c => out.push_str(&regex_lite::escape(&c.to_string())),
        }
    }
    for _ in 0..depth {
        out.push(')');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, name: &str) -> bool {
        FloatingSubnet::new("", pattern, "")
            .name_matcher()
            .unwrap()
            .unwrap()
            .matches(name)
    }

    #[test]
    fn name_patterns_as_occm_reads_them() {
        assert!(matches("public-*", "public-a"));
        assert!(!matches("public-*", "xpublic-a"));
        assert!(matches("public-?", "public-b"));
        assert!(!matches("public-?", "public-bc"));
        assert!(matches("{ext,pub}-v4", "pub-v4"));
        assert!(matches("a.b", "a.b"));
        assert!(!matches("a.b", "axb"));
        assert!(matches("~^pub(lic)?-[0-9]+$", "public-12"));
        assert!(matches("~pub", "pub"));
        assert!(!matches("~pub", "public"), "the whole name");
        assert!(matches("!public-*", "private"));
        assert!(!matches("!public-*", "public-a"));
        assert!(matches("!~pub.*", "ext"));
        let bad = FloatingSubnet::new("", "~(", "")
            .name_matcher()
            .unwrap_err();
        assert!(bad.contains("`~(`"), "{bad}");
    }

    #[test]
    fn tags_become_neutrons_filters_as_occm_sends_them() {
        let query = |tags: &str| FloatingSubnet::new("", "", tags).tag_query();
        assert_eq!(query("a, b"), Some(("tags-any", "a,b".into())));
        assert_eq!(query("&a,b"), Some(("tags", "a,b".into())));
        assert_eq!(query("!a"), Some(("not-tags", "a".into())));
        assert_eq!(query("!&a,b"), Some(("not-tags-any", "a,b".into())));
        assert_eq!(query(""), None);
    }

    #[test]
    fn an_id_wins_over_a_pattern() {
        let spec = FloatingSubnet::new("s1", "public-*", "a");
        assert_eq!(spec.id, "s1");
        assert!(spec.configured() && !spec.matches_by_pattern());
        assert!(FloatingSubnet::new("", "", "a").matches_by_pattern());
        assert!(!FloatingSubnet::new("", "", "").configured());
        assert_eq!(
            FloatingSubnet::new("", "p*", "&a").to_string(),
            "name pattern `p*`, tags `&a`"
        );
    }
}
