//! Calendar arithmetic for the double's clock: the formats the services write times in
//! (ECS's ISO 8601 with `Z`, ELB's without, EIP's `yyyy-MM-dd HH:mm:ss`), the
//! `X-Sdk-Date` format the signer uses (`20060102T150405Z`), and the RFC 7231 `Date`
//! header every answer carries. All times are seconds since the Unix epoch, UTC.

/// Days since 1970-01-01 of a civil date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * i64::from((month + 9) % 12) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The civil date `(year, month, day)` of a day since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let (era, day_of_era) = (days.div_euclid(146_097), days.rem_euclid(146_097));
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = (if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    }) as u32;
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

/// The fields of a time: `(year, month, day, hour, minute, second)`.
fn fields(unix: i64) -> (i64, u32, u32, i64, i64, i64) {
    let (year, month, day) = civil_from_days(unix.div_euclid(86_400));
    let in_day = unix.rem_euclid(86_400);
    (
        year,
        month,
        day,
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60,
    )
}

/// `20060102T150405Z`: the signer's `X-Sdk-Date`.
pub fn sdk_date(unix: i64) -> String {
    let (y, mo, d, h, mi, s) = fields(unix);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// Parses an `X-Sdk-Date` (`20060102T150405Z`, exactly), as the signer writes it.
pub fn parse_sdk_date(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() != 16
        || bytes[8] != b'T'
        || bytes[15] != b'Z'
        || !bytes[..8]
            .iter()
            .chain(&bytes[9..15])
            .all(u8::is_ascii_digit)
    {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text[range].parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(4..6)?, number(6..8)?);
    let (hour, minute, second) = (number(9..11)?, number(11..13)?, number(13..15)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(
        days_from_civil(year, month as u32, day as u32) * 86_400
            + hour * 3600
            + minute * 60
            + second,
    )
}

/// `2026-06-02T10:00:00Z`: how ECS writes `created` and `updated`.
pub fn iso8601(unix: i64) -> String {
    let (y, mo, d, h, mi, s) = fields(unix);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `2026-06-02T10:00:00`: how the shared ELB (v2) writes `created_at` and `updated_at`,
/// and the VPC service a subnet's.
pub fn iso8601_local(unix: i64) -> String {
    let (y, mo, d, h, mi, s) = fields(unix);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}")
}

/// `2026-06-02 10:00:00`: how the EIP service writes `create_time`.
pub fn spaced(unix: i64) -> String {
    let (y, mo, d, h, mi, s) = fields(unix);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
}

/// `Tue, 02 Jun 2026 10:00:00 GMT`: an HTTP `Date` (RFC 7231's IMF-fixdate).
pub fn http_date(unix: i64) -> String {
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s) = fields(unix);
    // 1970-01-01 was a Thursday.
    let weekday = WEEKDAYS[unix.div_euclid(86_400).rem_euclid(7) as usize];
    let month = MONTHS[(mo - 1) as usize];
    format!("{weekday}, {d:02} {month} {y:04} {h:02}:{mi:02}:{s:02} GMT")
}

/// Seconds since the epoch now, by the host's clock.
pub fn system_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_round_trip() {
        // 2024-02-29T12:00:00Z, a Thursday.
        let at = 1_709_208_000;
        assert_eq!(iso8601(at), "2024-02-29T12:00:00Z");
        assert_eq!(iso8601_local(at), "2024-02-29T12:00:00");
        assert_eq!(spaced(at), "2024-02-29 12:00:00");
        assert_eq!(sdk_date(at), "20240229T120000Z");
        assert_eq!(parse_sdk_date("20240229T120000Z"), Some(at));
        assert_eq!(http_date(at), "Thu, 29 Feb 2024 12:00:00 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_887_151), "Tue, 15 Nov 1994 08:12:31 GMT");
        assert_eq!(parse_sdk_date("20060102T150405Z"), Some(1_136_214_245));
    }

    #[test]
    fn malformed_sdk_dates_are_refused() {
        for bad in [
            "",
            "2006-01-02T15:04:05Z",
            "20060102T150405",
            "20061302T150405Z",
            "20060102T250405Z",
            "2006010xT150405Z",
        ] {
            assert_eq!(parse_sdk_date(bad), None, "{bad}");
        }
    }
}
