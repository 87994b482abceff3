//! occm's `[Global]` keys that wasm-ccm's host holds instead of the provider: the
//! Keystone login (who logs in, and its secret), the TLS files and clouds.yaml. The
//! host logs in to Keystone with the provider policy's `keystone` rule (the secret in a
//! file of the credentials Secret, which the rule names) and connects with the
//! policy's `tls`, so the provider's cloud config holds none of them.
//!
//! [`KEYS`] is the one list, in gcfg's spelling (lowercase, without `-` and `_`: occm's
//! `application-credential-secret` is `applicationcredentialsecret`), each key with
//! what it holds and what the provider does when its cloud config has it. Both sides
//! read it:
//! - the provider ([`refused`], [`held_by_policy`]): a secret is an error saying where
//!   it goes; the rest is skipped without a word;
//! - `wasm-ccm import-occm-config` ([`moved`]): every key is taken out of the
//!   `cloud.conf` it writes for the provider.

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A secret: a password, an application credential's secret, a token.
    Secret,
    /// Who logs in, and where: the user, the project, their domains, the application
    /// credential, the trust.
    Identity,
    /// The TLS files and verification (the policy's `tls`).
    Tls,
    /// clouds.yaml in place of `[Global]`.
    Clouds,
}

/// What the provider does when its cloud config's `[Global]` has the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InProvider {
    /// Refused: an error at start saying the secret goes in the credentials directory.
    Refused,
    /// Skipped: the policy holds it.
    HeldByPolicy,
    /// Not one of the provider's keys: logged as not used, as any other.
    NotKnown,
}

/// One `[Global]` key the host holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// gcfg's spelling: lowercase, without `-` and `_`.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// What the provider does with it.
    pub provider: InProvider,
}

const fn key(name: &'static str, kind: Kind, provider: InProvider) -> Key {
    Key {
        name,
        kind,
        provider,
    }
}

use InProvider::{HeldByPolicy, NotKnown, Refused};
use Kind::{Clouds, Identity, Secret, Tls};

/// occm's `[Global]` keys the host's policy or the credentials Secret holds.
pub static KEYS: [Key; 30] = [
    key("username", Identity, HeldByPolicy),
    key("userid", Identity, HeldByPolicy),
    key("password", Secret, Refused),
    key("tenantid", Identity, HeldByPolicy),
    key("tenantname", Identity, HeldByPolicy),
    key("projectid", Identity, HeldByPolicy),
    key("projectname", Identity, HeldByPolicy),
    key("domainid", Identity, HeldByPolicy),
    key("domainname", Identity, HeldByPolicy),
    key("tenantdomainid", Identity, HeldByPolicy),
    key("tenantdomainname", Identity, HeldByPolicy),
    key("projectdomainid", Identity, HeldByPolicy),
    key("projectdomainname", Identity, HeldByPolicy),
    key("userdomainid", Identity, HeldByPolicy),
    key("userdomainname", Identity, HeldByPolicy),
    key("applicationcredentialid", Identity, HeldByPolicy),
    key("applicationcredentialname", Identity, HeldByPolicy),
    key("applicationcredentialsecret", Secret, Refused),
    key("trustid", Identity, HeldByPolicy),
    key("trusteeid", Identity, HeldByPolicy),
    key("trusteepassword", Secret, Refused),
    key("cafile", Tls, HeldByPolicy),
    key("certfile", Tls, HeldByPolicy),
    key("keyfile", Tls, HeldByPolicy),
    key("tlsinsecure", Tls, HeldByPolicy),
    key("useclouds", Clouds, HeldByPolicy),
    key("cloudsfile", Clouds, HeldByPolicy),
    key("cloud", Clouds, HeldByPolicy),
    key("token", Secret, Refused),
    // The provider reads its identity endpoint from `auth-url` only.
    key("authurlinternal", Identity, NotKnown),
];

/// The key `name` (gcfg's spelling), if the host holds it.
pub fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// Whether the provider refuses `name` (gcfg's spelling): a secret.
pub fn refused(name: &str) -> bool {
    find(name).is_some_and(|k| k.provider == InProvider::Refused)
}

/// Whether the provider skips `name` (gcfg's spelling) as the policy's.
pub fn held_by_policy(name: &str) -> bool {
    find(name).is_some_and(|k| k.provider == InProvider::HeldByPolicy)
}

/// Whether `import-occm-config` takes `name` (gcfg's spelling) out of the provider's
/// `cloud.conf`: every key of [`KEYS`].
pub fn moved(name: &str) -> bool {
    find(name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each name once, in gcfg's spelling.
    #[test]
    fn names_are_gcfgs_and_unique() {
        for (i, k) in KEYS.iter().enumerate() {
            assert!(
                !k.name.is_empty() && k.name.bytes().all(|b| b.is_ascii_lowercase()),
                "{}",
                k.name
            );
            assert!(
                KEYS[..i].iter().all(|other| other.name != k.name),
                "{} twice",
                k.name
            );
        }
    }

    /// The provider refuses exactly the secrets; every other key but one it does not
    /// know is the policy's.
    #[test]
    fn the_provider_refuses_the_secrets() {
        for k in &KEYS {
            assert_eq!(
                k.provider == InProvider::Refused,
                k.kind == Kind::Secret,
                "{}",
                k.name
            );
        }
        let count = |p: InProvider| KEYS.iter().filter(|k| k.provider == p).count();
        assert_eq!(count(InProvider::Refused), 4);
        assert_eq!(count(InProvider::HeldByPolicy), 25);
        assert_eq!(count(InProvider::NotKnown), 1);
        assert!(refused("password") && refused("token"));
        assert!(held_by_policy("tlsinsecure") && held_by_policy("cloud"));
        assert!(!refused("authurlinternal") && !held_by_policy("authurlinternal"));
        assert!(moved("authurlinternal") && moved("applicationcredentialsecret"));
        assert!(!moved("authurl") && !moved("region") && find("region").is_none());
    }
}
