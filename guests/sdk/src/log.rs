//! Structured logging through the host (`wasm-ccm:provider/logging`).

use crate::bindings::wasm_ccm::provider::logging::{self, Level};

fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    logging::log(level, message, &fields);
}

/// A debug record.
pub fn debug(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Debug, message, fields);
}

/// An info record.
pub fn info(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Info, message, fields);
}

/// A warning.
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Warn, message, fields);
}

/// An error record.
pub fn error(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Error, message, fields);
}

/// Sends panic messages to the host log before the instance traps, so operators
/// see why a provider call failed.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        emit(Level::Error, "provider panicked", &[("panic", &message)]);
    }));
}
