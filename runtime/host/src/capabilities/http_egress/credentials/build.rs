//! How a policy's rules become [`CredentialKind`]s: each kind's policy type implements
//! [`BuildKind`], given a [`BuildContext`] with what kinds share: the credentials
//! directory, the provider's label and metrics, state kept across policy reloads
//! ([`Sessions`]: a login and its token), and state shared by the rules of one policy.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use super::CredentialKind;
use super::files::{Confinement, CredentialError};
use crate::metrics::{LoginLabels, ProviderLabel, ProviderMetrics};

/// A kind of the policy's credential rules the host can add to requests: the policy
/// type (`KeystoneCredential`, ...) makes its [`CredentialKind`].
pub trait BuildKind {
    /// The kind for this rule.
    fn build(&self, ctx: &mut BuildContext<'_>)
    -> Result<Arc<dyn CredentialKind>, CredentialError>;
}

/// What a kind is built with.
pub struct BuildContext<'a> {
    pub(super) confinement: &'a Arc<Confinement>,
    pub(super) sessions: &'a Sessions,
    pub(super) kind: &'static str,
    shared: HashMap<TypeId, Box<dyn Any>>,
}

impl<'a> BuildContext<'a> {
    pub(super) fn new(confinement: &'a Arc<Confinement>, sessions: &'a Sessions) -> Self {
        Self {
            confinement,
            sessions,
            kind: "",
            shared: HashMap::new(),
        }
    }

    /// Reads Secret files inside the credentials directory.
    pub fn confinement(&self) -> &Arc<Confinement> {
        self.confinement
    }

    /// The provider's label.
    pub fn provider(&self) -> &Arc<ProviderLabel> {
        &self.sessions.provider
    }

    /// The kind's policy key (the `kind` label of `wasm_ccm_credential_logins_total`).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Counts the kind's logins.
    pub fn logins(&self) -> Logins {
        Logins {
            provider: self.sessions.provider.clone(),
            metrics: self.sessions.metrics.clone(),
            kind: self.kind,
        }
    }

    /// The session of `key`, kept across policy reloads: the one a rule with the same
    /// key had under the previous policy (its login, its token), else `make()`'s.
    /// Sessions no rule of the new policy asks for are dropped once it is built.
    pub fn session<K, S>(&mut self, key: &K, make: impl FnOnce() -> S) -> Arc<S>
    where
        K: Eq + Hash + Clone + Send + 'static,
        S: Send + Sync + 'static,
    {
        self.sessions.session(key, make)
    }

    /// State the rules of this policy share (a web identity's keys, ...), made on
    /// first use.
    pub fn shared<T: Default + 'static>(&mut self) -> &mut T {
        self.shared
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()))
            .downcast_mut::<T>()
            .expect("the entry of T's TypeId holds a T")
    }
}

/// `wasm_ccm_credential_logins_total` for one kind of one provider.
#[derive(Clone)]
pub struct Logins {
    provider: Arc<ProviderLabel>,
    metrics: Arc<ProviderMetrics>,
    kind: &'static str,
}

impl std::fmt::Debug for Logins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logins").field("kind", &self.kind).finish()
    }
}

impl Logins {
    /// Counts one login, `ok` or not.
    pub fn count(&self, ok: bool) {
        self.metrics
            .credential_logins
            .get_or_create(&LoginLabels {
                provider: self.provider.get().to_string(),
                kind: self.kind.into(),
                result: if ok { "success" } else { "failure" }.into(),
            })
            .inc();
    }
}

/// A provider's credential sessions by kind and key, kept across policy reloads.
pub struct Sessions {
    provider: Arc<ProviderLabel>,
    metrics: Arc<ProviderMetrics>,
    shelves: Mutex<HashMap<TypeId, Box<dyn Shelf>>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

/// One kind's sessions, and the keys the policy being built asked for.
struct Kept<K, S> {
    sessions: HashMap<K, Arc<S>>,
    asked: HashSet<K>,
}

/// [`Kept`] whatever its types: what a finished build does to it.
trait Shelf: Send {
    fn as_any(&mut self) -> &mut dyn Any;
    /// Drops the sessions not asked for since the last sweep.
    fn sweep(&mut self);
    /// Forgets what was asked for.
    fn forget_asked(&mut self);
}

impl<K: Eq + Hash + Clone + Send + 'static, S: Send + Sync + 'static> Shelf for Kept<K, S> {
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn sweep(&mut self) {
        let asked = std::mem::take(&mut self.asked);
        self.sessions.retain(|key, _| asked.contains(key));
    }

    fn forget_asked(&mut self) {
        self.asked.clear();
    }
}

impl Sessions {
    /// No sessions yet, for `provider`.
    pub fn new(provider: Arc<ProviderLabel>, metrics: Arc<ProviderMetrics>) -> Self {
        Self {
            provider,
            metrics,
            shelves: Mutex::new(HashMap::new()),
        }
    }

    fn session<K, S>(&self, key: &K, make: impl FnOnce() -> S) -> Arc<S>
    where
        K: Eq + Hash + Clone + Send + 'static,
        S: Send + Sync + 'static,
    {
        let mut shelves = self.shelves.lock().unwrap_or_else(|p| p.into_inner());
        let shelf = shelves
            .entry(TypeId::of::<(K, S)>())
            .or_insert_with(|| {
                Box::new(Kept::<K, S> {
                    sessions: HashMap::new(),
                    asked: HashSet::new(),
                })
            })
            .as_any()
            .downcast_mut::<Kept<K, S>>()
            .expect("the shelf of (K, S)'s TypeId holds a Kept<K, S>");
        shelf.asked.insert(key.clone());
        shelf
            .sessions
            .entry(key.clone())
            .or_insert_with(|| Arc::new(make()))
            .clone()
    }

    /// Before a policy is built: nothing asked for yet (a build that failed midway
    /// keeps nothing alive by having asked).
    pub(super) fn begin(&self) {
        let mut shelves = self.shelves.lock().unwrap_or_else(|p| p.into_inner());
        for shelf in shelves.values_mut() {
            shelf.forget_asked();
        }
    }

    /// After a policy was built: the sessions its rules did not ask for are dropped.
    pub(super) fn sweep(&self) {
        let mut shelves = self.shelves.lock().unwrap_or_else(|p| p.into_inner());
        for shelf in shelves.values_mut() {
            shelf.sweep();
        }
    }
}
