//! How a subcommand's result becomes the process's exit code.

use std::process::ExitCode;

/// Success, or the error and its causes on stderr and a failure.
pub fn exit_code<E: std::error::Error>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", crate::error_chain(&err));
            ExitCode::FAILURE
        }
    }
}
