//! Reading gcfg (git-config style) files, the format of Kubernetes cloud configs
//! (cloud-provider-aws's and cloud-provider-openstack's `cloud.conf`):
//!
//! ```
//! let entries = wasm_ccm_guest::gcfg::parse("[Global]\nauth-url = https://keystone:5000/v3\n").unwrap();
//! assert_eq!(entries[0].section, "global");
//! assert_eq!(entries[0].name, "authurl");
//! assert_eq!(entries[0].value, "https://keystone:5000/v3");
//! ```
//!
//! Names are matched as gcfg matches them: case-insensitively, ignoring `-` and `_`.
//! Errors name the line.

/// One variable of a gcfg file.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// The line it is on (1-based).
    pub line: usize,
    /// The section, lowercase.
    pub section: String,
    /// The subsection, case-sensitive, as written between quotes.
    pub subsection: Option<String>,
    /// The name, lowercase, without `-` and `_` (gcfg matches names that way).
    pub name: String,
    /// The value, unquoted and unescaped (`true` for a bare name).
    pub value: String,
}

/// A gcfg boolean (`true`/`yes`/`on`/`1`, `false`/`no`/`off`/`0`, any case); an
/// error names the line and the variable (`name`, as the user wrote it or as read).
pub fn boolean(value: &str, line: usize, name: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(format!(
            "cloud config line {line}: {name} `{value}` is not a boolean"
        )),
    }
}

/// Reads gcfg syntax: `[section]`, `[section "subsection"]`, `name = value` (values
/// may be quoted, with `\"`, `\\`, `\n`, `\t` escapes), `;` and `#` comments, and a
/// bare `name` meaning `true`.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with([';', '#']) {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let inner = strip_comment(rest)
                .trim_end()
                .strip_suffix(']')
                .ok_or_else(|| format!("cloud config line {line}: `[` without `]`"))?
                .trim();
            let (name, sub) = match inner.split_once(char::is_whitespace) {
                None => (inner, None),
                Some((name, sub)) => {
                    let sub = sub.trim();
                    let quoted = sub
                        .strip_prefix('"')
                        .and_then(|s| s.strip_suffix('"'))
                        .ok_or_else(|| {
                            format!("cloud config line {line}: subsection names are quoted: [{name} \"...\"]")
                        })?;
                    (name, Some(unescape(quoted, line)?))
                }
            };
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            {
                return Err(format!(
                    "cloud config line {line}: bad section name `{name}`"
                ));
            }
            section = Some((name.to_ascii_lowercase(), sub));
            continue;
        }
        let Some((section, subsection)) = &section else {
            return Err(format!(
                "cloud config line {line}: a variable before any [section]"
            ));
        };
        let (name, value) = match trimmed.split_once('=') {
            Some((name, value)) => (name.trim(), value_of(value, line)?),
            None => (strip_comment(trimmed).trim(), "true".to_owned()),
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "cloud config line {line}: bad variable name `{name}`"
            ));
        }
        entries.push(Entry {
            line,
            section: section.clone(),
            subsection: subsection.clone(),
            name: name
                .chars()
                .filter(|c| *c != '-' && *c != '_')
                .collect::<String>()
                .to_ascii_lowercase(),
            value,
        });
    }
    Ok(entries)
}

/// The text before an unquoted `;` or `#`.
fn strip_comment(text: &str) -> &str {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ';' | '#' if !quoted => return &text[..i],
            _ => {}
        }
    }
    text
}

/// A value: unquoted parts trimmed, quoted parts kept, escapes applied.
fn value_of(text: &str, line: usize) -> Result<String, String> {
    let text = strip_comment(text).trim();
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => out.push(escape(chars.next(), line)?),
            c => out.push(c),
        }
    }
    if quoted {
        return Err(format!("cloud config line {line}: unterminated quote"));
    }
    Ok(out)
}

fn unescape(text: &str, line: usize) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(escape(chars.next(), line)?),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn escape(c: Option<char>, line: usize) -> Result<char, String> {
    match c {
        Some('"') => Ok('"'),
        Some('\\') => Ok('\\'),
        Some('n') => Ok('\n'),
        Some('t') => Ok('\t'),
        other => Err(format!(
            "cloud config line {line}: unknown escape `\\{}`",
            other.map(String::from).unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcfg_syntax() {
        let entries = parse(
            "; comment\n# comment\n[global]\nZone = us-east-1a ; trailing\nVPC=\"vpc-1 ;x\"\n\
             Disable-Security-Group-Ingress\n[ServiceOverride \"1\"]\nService = ec2\n",
        )
        .unwrap();
        let flat: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    e.section.as_str(),
                    e.subsection.as_deref(),
                    e.name.as_str(),
                    e.value.as_str(),
                )
            })
            .collect();
        assert_eq!(
            flat,
            [
                ("global", None, "zone", "us-east-1a"),
                ("global", None, "vpc", "vpc-1 ;x"),
                ("global", None, "disablesecuritygroupingress", "true"),
                ("serviceoverride", Some("1"), "service", "ec2"),
            ]
        );
        assert!(parse("Zone = x").unwrap_err().contains("line 1"));
        assert!(parse("[Global\n").unwrap_err().contains("line 1"));
        assert!(
            parse("[ServiceOverride 1]\n")
                .unwrap_err()
                .contains("quoted")
        );
        assert!(
            parse("[Global]\nVPC = \"x\n")
                .unwrap_err()
                .contains("line 2")
        );
    }
}
