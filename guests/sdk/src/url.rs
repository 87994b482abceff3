//! A minimal `scheme://authority/path` parser for endpoint URLs in provider configs.

/// An absolute http(s) URL split the way `wasi:http` wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `http` or `https`.
    pub scheme: String,
    /// `host[:port]`.
    pub authority: String,
    /// Path and query, starting with `/`.
    pub path_and_query: String,
}

/// Why a URL was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError(pub String);

impl std::fmt::Display for UrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid URL `{}`: expected http(s)://host[:port][/path]",
            self.0
        )
    }
}

impl std::error::Error for UrlError {}

impl Url {
    /// Parses `http(s)://host[:port][/path][?query]`.
    pub fn parse(text: &str) -> Result<Self, UrlError> {
        let err = || UrlError(text.to_owned());
        let (scheme, rest) = text.split_once("://").ok_or_else(err)?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(err());
        }
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() || authority.contains(['@', ' ']) {
            return Err(err());
        }
        let path_and_query = if path.is_empty() {
            "/".to_owned()
        } else if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_owned()
        };
        Ok(Self {
            scheme,
            authority: authority.to_owned(),
            path_and_query,
        })
    }

    /// This URL with `path` appended to its path (a base `/api` + `/v1/x` gives
    /// `/api/v1/x`).
    pub fn join(&self, path: &str) -> Url {
        let base = self.path_and_query.trim_end_matches('/');
        Url {
            path_and_query: format!("{base}{path}"),
            ..self.clone()
        }
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme, self.authority, self.path_and_query
        )
    }
}

/// Percent-encodes a query or path component (RFC 3986 unreserved characters kept).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_joins() {
        let u = Url::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(u.authority, "127.0.0.1:8080");
        assert_eq!(
            u.join("/v1/instances").to_string(),
            "http://127.0.0.1:8080/v1/instances"
        );
        let u = Url::parse("HTTPS://api.example.com/base/").unwrap();
        assert_eq!(u.join("/v1").path_and_query, "/base/v1");
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://").is_err());
        assert!(Url::parse("127.0.0.1:80").is_err());
    }

    #[test]
    fn encodes_components() {
        assert_eq!(encode_component("node-1.a_b~"), "node-1.a_b~");
        assert_eq!(encode_component("a b/c&d"), "a%20b%2Fc%26d");
    }
}
