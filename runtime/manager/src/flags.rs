//! The grammar of upstream's flag values, shared by every flag the controller manager
//! takes: booleans as pflag reads them, Go durations, percentages.

use std::time::Duration;

/// Parses a boolean flag's value as upstream's flag library (pflag, with Go's
/// `strconv.ParseBool`) does: `1`, `t`, `T`, `TRUE`, `true`, `True`, and `0`, `f`,
/// `F`, `FALSE`, `false`, `False`. A bare flag (`--leader-elect`) is true; a value
/// must follow `=`, as pflag requires.
pub fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("`{text}` is not a boolean (true or false)")),
    }
}

/// Parses a flag's Go-style duration (`500ms`, `10s`, `5m`, `1m30s`) with the one
/// grammar of the host ([`wasm_ccm_host::policy::parse_duration`]).
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    wasm_ccm_host::policy::parse_duration(text).map_err(|e| e.to_string())
}

/// Parses a percentage between 0 and 100.
pub fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "invalid percentage {text:?}: a number from 0 to 100"
        )),
    }
}
