//! The machinery behind the interface table in [`super::interfaces`].
//!
//! `interface_table!` takes one row per optional interface of the contract and
//! generates everything that is written once per interface:
//! - [`Interface`](super::Interface), with [`Interface::ALL`](super::Interface::ALL) and
//!   the WIT names that inspection and `check` use;
//! - the export lookups resolved once per compiled component (`Indices`) and the
//!   typed export handles of one instance (`Guests`), used by loading and the pool;
//! - the typed call handle of each interface and the accessor on
//!   [`Provider`](crate::provider::Provider) returning it when the interface is exported.
//!
//! [`Exports`] is the set of optional interfaces a component exports.

use super::Interface;

/// Which optional interfaces a provider exports.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Exports(u32);

impl Exports {
    /// No optional interface.
    pub const NONE: Exports = Exports(0);

    /// Whether `interface` is exported.
    pub fn contains(self, interface: Interface) -> bool {
        self.0 & interface.bit() != 0
    }

    /// These exports plus `interface`.
    pub fn with(self, interface: Interface) -> Self {
        Self(self.0 | interface.bit())
    }

    /// These exports without `interface`.
    pub fn without(self, interface: Interface) -> Self {
        Self(self.0 & !interface.bit())
    }

    /// The exported interfaces, in contract order.
    pub fn iter(self) -> impl Iterator<Item = Interface> {
        Interface::ALL
            .iter()
            .copied()
            .filter(move |i| self.contains(*i))
    }

    /// The exported interfaces by WIT name, in contract order.
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Interface::wit_name).collect()
    }
}

impl FromIterator<Interface> for Exports {
    fn from_iter<T: IntoIterator<Item = Interface>>(iter: T) -> Self {
        iter.into_iter().fold(Exports::NONE, Exports::with)
    }
}

impl std::fmt::Debug for Exports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

/// An exported interface whose functions do not have the contract's types.
#[derive(Debug)]
pub(crate) struct ContractMismatch {
    /// The interface's WIT name (`identity` or an optional interface).
    pub interface: &'static str,
    /// What wasmtime found wrong.
    pub source: wasmtime::Error,
}

/// The export lookups (`Indices`) and typed export handles (`Guests`) of one contract
/// version, for the interfaces that version has: `module => Variant, "wit-name";`.
/// Invoked inside a module where `bindings` is that version's generated bindings.
macro_rules! guest_exports {
    ($( $module:ident => $variant:ident, $wit:literal; )*) => {
        /// Export lookups resolved once per compiled component.
        #[derive(Clone)]
        pub(crate) struct Indices {
            pub identity: bindings::exports::wasm_ccm::provider::identity::GuestIndices,
            $( pub $module: Option<bindings::exports::wasm_ccm::provider::$module::GuestIndices>, )*
        }

        /// Typed export handles of one instance.
        pub(crate) struct Guests {
            pub identity: bindings::exports::wasm_ccm::provider::identity::Guest,
            $( $module: Option<bindings::exports::wasm_ccm::provider::$module::Guest>, )*
        }

        impl Indices {
            /// The lookups of `identity` and of every interface in `exports`.
            pub(crate) fn new(
                pre: &wasmtime::component::InstancePre<$crate::capabilities::HostState>,
                exports: $crate::provider::Exports,
            ) -> Result<Self, $crate::provider::ContractMismatch> {
                let mismatch = |interface: &'static str| {
                    move |source| $crate::provider::ContractMismatch { interface, source }
                };
                Ok(Self {
                    identity: bindings::exports::wasm_ccm::provider::identity::GuestIndices::new(pre)
                        .map_err(mismatch("identity"))?,
                    $(
                        $module: exports
                            .contains($crate::provider::Interface::$variant)
                            .then(|| bindings::exports::wasm_ccm::provider::$module::GuestIndices::new(pre))
                            .transpose()
                            .map_err(mismatch($wit))?,
                    )*
                })
            }

            /// The typed handles of `instance`.
            pub(crate) fn load(
                &self,
                store: &mut wasmtime::Store<$crate::capabilities::HostState>,
                instance: &wasmtime::component::Instance,
            ) -> Result<Guests, $crate::provider::ContractMismatch> {
                let mismatch = |interface: &'static str| {
                    move |source| $crate::provider::ContractMismatch { interface, source }
                };
                Ok(Guests {
                    identity: self
                        .identity
                        .load(&mut *store, instance)
                        .map_err(mismatch("identity"))?,
                    $(
                        $module: self
                            .$module
                            .as_ref()
                            .map(|i| i.load(&mut *store, instance))
                            .transpose()
                            .map_err(mismatch($wit))?,
                    )*
                })
            }
        }

        impl Guests {
            $(
                /// The interface's handle; call only when it is exported.
                pub(crate) fn $module(&self) -> &bindings::exports::wasm_ccm::provider::$module::Guest {
                    self.$module
                        .as_ref()
                        .expect("handles exist only for exported interfaces")
                }
            )*
        }
    };
}

/// One row per optional interface:
/// `Variant => bindings_module, "wit-name", HandleType;`, each with its doc comment.
macro_rules! interface_table {
    ($( $(#[$doc:meta])* $variant:ident => $module:ident, $wit:literal, $handle:ident; )*) => {
        /// An optional interface of the provider contract.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Interface {
            $( $(#[$doc])* $variant, )*
        }

        impl Interface {
            /// Every optional interface, in contract order.
            pub const ALL: &'static [Interface] = &[$(Interface::$variant),*];

            /// The interface with this WIT name.
            pub fn from_wit_name(name: &str) -> Option<Interface> {
                Self::ALL.iter().copied().find(|i| i.wit_name() == name)
            }

            /// The interface's WIT name, e.g. `load-balancer`.
            pub fn wit_name(self) -> &'static str {
                match self {
                    $( Interface::$variant => $wit, )*
                }
            }

            pub(crate) fn bit(self) -> u32 {
                1 << (self as u32)
            }
        }

        $(
            $(#[$doc])*
            ///
            /// A handle borrowed from a [`Provider`](crate::provider::Provider) that exports
            /// the interface; each method is one WIT function, called on a pooled instance.
            #[derive(Clone, Copy)]
            pub struct $handle<'a>(&'a $crate::provider::Provider);

            impl $handle<'_> {
                /// The interface this handle calls.
                pub const INTERFACE: Interface = Interface::$variant;
            }
        )*

        impl $crate::provider::Provider {
            $(
                $(#[$doc])*
                ///
                /// `None` when the component does not export it.
                pub fn $module(&self) -> Option<$handle<'_>> {
                    self.exports().contains(Interface::$variant).then_some($handle(self))
                }
            )*
        }
    };
}
