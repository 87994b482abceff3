//! Structured logs through the host (`wasm-ccm:provider/logging`): the host records
//! them with `tracing`, tagged with the provider's name, rate-limited.
//!
//! Two ways to log:
//! - the functions here, with fields as pairs:
//!   `log::info("created load balancer", &[("name", &name)])`;
//! - the [`log`](https://docs.rs/log) crate's macros, after [`init`] (done by
//!   [`export_provider!`](crate::export_provider)): `log::info!(name = name.as_str(); "created load balancer")`.
//!   Levels map one to one (`trace` included); key-values become fields.
//!
//! Outside a component (native unit tests) records go to stderr.

use crate::bindings::wasm_ccm::provider::logging::Level;

/// Sends one record to the host (to stderr outside a component).
pub fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    write(level, message, &fields);
}

#[cfg(target_arch = "wasm32")]
fn write(level: Level, message: &str, fields: &[(String, String)]) {
    crate::bindings::wasm_ccm::provider::logging::log(level, message, fields);
}

#[cfg(not(target_arch = "wasm32"))]
fn write(level: Level, message: &str, fields: &[(String, String)]) {
    let fields: String = fields.iter().map(|(k, v)| format!(" {k}={v:?}")).collect();
    eprintln!("{level:?} {message}{fields}");
}

/// A trace record.
pub fn trace(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Trace, message, fields);
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

/// Sends panic messages to the host log before the instance traps, so operators see
/// why a provider call failed. Installed by
/// [`export_provider!`](crate::export_provider).
pub fn install_panic_hook() {
    #[cfg(target_arch = "wasm32")]
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        emit(Level::Error, "provider panicked", &[("panic", &message)]);
    }));
}

/// The `log` facade's logger: every record to the host, all levels enabled (the host
/// filters).
struct HostLogger;

impl ::log::Log for HostLogger {
    fn enabled(&self, _metadata: &::log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &::log::Record<'_>) {
        let (level, message, fields) = parts(record);
        write(level, &message, &fields);
    }

    fn flush(&self) {}
}

/// A `log` record as the contract's level, message and fields.
fn parts(record: &::log::Record<'_>) -> (Level, String, Vec<(String, String)>) {
    let level = match record.level() {
        ::log::Level::Error => Level::Error,
        ::log::Level::Warn => Level::Warn,
        ::log::Level::Info => Level::Info,
        ::log::Level::Debug => Level::Debug,
        ::log::Level::Trace => Level::Trace,
    };
    let mut fields = Fields(Vec::new());
    // A value that fails to format is left out; the record still goes.
    let _ = record.key_values().visit(&mut fields);
    (level, record.args().to_string(), fields.0)
}

struct Fields(Vec<(String, String)>);

impl<'kvs> ::log::kv::VisitSource<'kvs> for Fields {
    fn visit_pair(
        &mut self,
        key: ::log::kv::Key<'kvs>,
        value: ::log::kv::Value<'kvs>,
    ) -> Result<(), ::log::kv::Error> {
        self.0.push((key.to_string(), value.to_string()));
        Ok(())
    }
}

/// Makes the `log` crate's macros write to the host. Harmless when called again.
pub fn init() {
    static LOGGER: HostLogger = HostLogger;
    if ::log::set_logger(&LOGGER).is_ok() {
        ::log::set_max_level(::log::LevelFilter::Trace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_records_keep_their_level_and_fields() {
        let levels = [
            (::log::Level::Trace, Level::Trace),
            (::log::Level::Debug, Level::Debug),
            (::log::Level::Info, Level::Info),
            (::log::Level::Warn, Level::Warn),
            (::log::Level::Error, Level::Error),
        ];
        let kvs: [(&str, ::log::kv::Value<'_>); 2] = [
            ("name", ::log::kv::Value::from("lb-1")),
            ("nodes", ::log::kv::Value::from(3u64)),
        ];
        for (from, to) in levels {
            let (level, message, fields) = parts(
                &::log::Record::builder()
                    .level(from)
                    .args(format_args!("created load balancer"))
                    .key_values(&kvs)
                    .build(),
            );
            assert_eq!(level, to);
            assert_eq!(message, "created load balancer");
            assert_eq!(
                fields,
                [("name".into(), "lb-1".into()), ("nodes".into(), "3".into())]
            );
        }
    }
}
