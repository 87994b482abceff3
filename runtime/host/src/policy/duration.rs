//! The one duration grammar of wasm-ccm, Go's `time.ParseDuration` as Kubernetes
//! flags use it: a sequence of decimal numbers with a unit each, such as `500ms`,
//! `10s`, `1m30s`, `1.5h`; units `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`; `0` alone
//! needs no unit. Negative durations are refused (no timeout or period can be
//! negative), and so is anything that does not fit in a [`Duration`]: no input
//! panics.

use std::time::Duration;

/// Why a duration could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: {reason}; use forms such as 500ms, 10s, 5m or 1m30s")]
pub struct DurationError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a Go-style duration such as `1m30s`.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        text: text.to_owned(),
        reason,
    };
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(err("negative durations are not allowed"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(err("empty"));
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err("expected a number"));
        }
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let nanos_per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err("number too large"))?
        };
        let mut nanos = whole
            .checked_mul(nanos_per_unit)
            .ok_or_else(|| err("too large"))?;
        // The fraction, digit by digit, in nanoseconds (extra precision is dropped).
        let mut scale = nanos_per_unit;
        for digit in fraction.bytes() {
            scale /= 10;
            nanos = nanos
                .checked_add(u128::from(digit - b'0') * scale)
                .ok_or_else(|| err("too large"))?;
        }
        let part = u64::try_from(nanos / 1_000_000_000)
            .ok()
            .map(|secs| Duration::new(secs, (nanos % 1_000_000_000) as u32))
            .ok_or_else(|| err("too large"))?;
        total = total.checked_add(part).ok_or_else(|| err("too large"))?;
        rest = next;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        let ok = |t: &str| parse_duration(t).unwrap();
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("10s"), Duration::from_secs(10));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("5m0s"), Duration::from_secs(300));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1h2m3s4ms5us6ns"), Duration::new(3723, 4_005_006));
        assert_eq!(ok("+3s"), Duration::from_secs(3));
    }

    #[test]
    fn everything_else_is_an_error_not_a_panic() {
        for bad in [
            "",
            "10",
            "s",
            "5 minutes",
            "1d",
            "-1s",
            "1..5s",
            ".s",
            "1s2",
            "ms",
            "+",
            "99999999999999999999999h",
            "18446744073709551615h",
            "1e3s",
            "NaNs",
            "infs",
            "94522879700260684295381835.9h",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }
}
