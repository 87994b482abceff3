//! The deliberate differences from cloud-provider-aws, as guests/aws/README.md lists
//! them (the table after the `oracle differences` marker), and which scenario a
//! flattened key belongs to.

/// One listed difference: a scenario (`*`: any) and a key pattern (`*` matches any
/// run of characters).
pub struct Listed {
    scenario: String,
    pattern: String,
}

impl Listed {
    pub fn matches(&self, scenario: &str, key: &str) -> bool {
        (self.scenario == "*" || self.scenario == scenario) && glob(&self.pattern, key)
    }
}

const README: &str = include_str!("../../guests/aws/README.md");
const MARKER: &str = "<!-- oracle differences";

/// The rows of the README's table: `| scenario | key pattern | why |`, code-quoted.
pub fn listed() -> Vec<Listed> {
    let start = README
        .find(MARKER)
        .expect("guests/aws/README.md has the oracle differences table");
    README[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert!(cells.len() >= 4, "a row of the oracle table: {row}");
            let unquote = |c: &str| c.trim_matches('`').to_owned();
            Listed {
                scenario: unquote(cells[1]),
                pattern: unquote(cells[2]),
            }
        })
        .collect()
}

/// `*` matches any run of characters; everything else itself.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// The scenario a key belongs to: the Service its load balancer or object names, a
/// target group by its name (`k8s-default-<first 8 of the Service's name>-`), else
/// `nodes`, `routes`, `security groups` or `elastic IPs`.
pub fn scenario_of(key: &str) -> String {
    if let Some(at) = key.find("<lb:") {
        let rest = &key[at + 4..];
        return rest[..rest.find('>').unwrap_or(rest.len())].to_owned();
    }
    for prefix in ["svc/", "events/service/"] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return rest[..rest.find('.').unwrap_or(rest.len())].to_owned();
        }
    }
    if let Some(rest) = key.strip_prefix("tg/k8s-default-") {
        // The longest name first: `nlb-eip-` is not `nlb`'s.
        let mut names = crate::side::scenario_names();
        names.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let owner = names.into_iter().find(|s| {
            let short: String = s.chars().take(8).collect();
            rest.starts_with(&format!("{short}-"))
        });
        if let Some(owner) = owner {
            return owner;
        }
    }
    if key.starts_with("node/") || key.starts_with("events/node/") {
        return "nodes".into();
    }
    if key.starts_with("routes") {
        return "routes".into();
    }
    if key.starts_with("sg/") {
        return "security groups".into();
    }
    if key.starts_with("eips") {
        return "elastic IPs".into();
    }
    "other".into()
}

#[test]
fn globs_match_as_documented() {
    assert!(glob("a*c", "abbbc"));
    assert!(glob(
        "*.Description",
        "sg/nodes.ipPermissions[0].Description"
    ));
    assert!(glob("x", "x"));
    assert!(!glob("a*c", "abd"));
    assert!(glob("a*b*c", "a1b2c"));
    assert!(!glob("a*b*c", "a1c"));
}
