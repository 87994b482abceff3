//! occm's `[Global]` values as read (gcfg names: lowercase, without `-` and `_`).

use wasm_ccm_guest::gcfg;

/// The `[Global]` values read, in order.
#[derive(Default)]
pub(crate) struct Global {
    pub(crate) values: Vec<(String, String)>,
}

impl Global {
    /// The first of `names` with a non-empty value.
    pub(crate) fn get(&self, names: &[&str]) -> Option<&str> {
        names.iter().find_map(|n| {
            self.values
                .iter()
                .find(|(k, v)| k == n && !v.is_empty())
                .map(|(_, v)| v.as_str())
        })
    }

    /// A boolean as gcfg reads it (`yes`, `on`, `1`, any case; a bare name is true);
    /// false when absent.
    pub(crate) fn flag(&self, name: &str) -> Result<bool, String> {
        match self.values.iter().rev().find(|(k, _)| k == name) {
            None => Ok(false),
            Some((_, v)) => gcfg::boolean(v, 0, name)
                .map_err(|_| format!("[Global] {name} `{v}` is not a boolean (true or false)")),
        }
    }
}
