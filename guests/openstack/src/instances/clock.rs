//! Times as Nova and HTTP write them: a `Date` header read (IMF-fixdate, `Sun, 06 Nov
//! 1994 08:49:37 GMT`) and a `changes-since` written (ISO 8601 in UTC,
//! `1994-11-06T08:49:37Z`), both as seconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds in a day.
const DAY: u64 = 86_400;
/// The months as IMF-fixdate names them.
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// This instance's clock, in seconds since the epoch (0 before it).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day since 1970-01-01: `(year, month, day)` (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
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
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `hh:mm:ss` as seconds into the day.
fn time_of_day(text: &str) -> Option<u64> {
    let mut parts = text.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    (parts.next().is_none() && h < 24 && m < 60 && s < 61).then_some(h * 3600 + m * 60 + s)
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, the form HTTP servers send) as
/// seconds since the epoch; `None` for another form or a date before the epoch.
pub fn parse_http_date(text: &str) -> Option<u64> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [_weekday, day, month, year, time, "GMT"] = fields.as_slice() else {
        return None;
    };
    let month = MONTHS.iter().position(|m| m == month)? as u32 + 1;
    let day: u32 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let days = days_from_civil(year.parse().ok()?, month, day);
    let seconds = days.checked_mul(DAY as i64)? + time_of_day(time)? as i64;
    u64::try_from(seconds).ok()
}

/// Seconds since the epoch as ISO 8601 in UTC (`1994-11-06T08:49:37Z`), as Nova takes
/// `changes-since`.
pub fn iso8601(seconds: u64) -> String {
    let (year, month, day) = civil_from_days((seconds / DAY) as i64);
    let in_day = seconds % DAY;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_are_read_and_iso_dates_written() {
        // RFC 9110's example, and a leap day.
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(iso8601(784_111_777), "1994-11-06T08:49:37Z");
        let leap = parse_http_date("Thu, 29 Feb 2024 12:00:00 GMT").unwrap();
        assert_eq!(leap, 1_709_208_000);
        assert_eq!(iso8601(leap), "2024-02-29T12:00:00Z");
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(1_767_225_599), "2025-12-31T23:59:59Z");
        for bad in [
            "",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 CET",
            "Thu, 01 Jan 1960 00:00:00 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_day_round_trips() {
        for days in 0..(200 * 366) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }
}
