//! How long an upstream asked us to stay away (SPEC §5.5 `honorRetryAfter`).
//!
//! The headers are read through a lookup function, so this crate needs no HTTP types: the gateway
//! passes `&|name| headers.get(name).and_then(|v| v.to_str().ok())`. Names are asked for in lower
//! case. Dates are parsed by hand (HTTP-date per RFC 9110 §5.6.7, timestamps per RFC 3339) because
//! the crate has no dependencies.
//!
//! Precedence: `retry-after-ms`, then `retry-after`, then the largest of the reset headers
//! (`x-ratelimit-reset-requests` / `-tokens`, OpenAI duration strings, and
//! `anthropic-ratelimit-*-reset`, RFC 3339 timestamps). A header that does not parse is ignored, as
//! if absent. A date in the past means "now": `Some(Duration::ZERO)`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The reset headers compared when neither `retry-after-ms` nor `retry-after` is usable.
const DURATION_RESET_HEADERS: [&str; 2] =
    ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"];
const TIMESTAMP_RESET_HEADERS: [&str; 4] = [
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
];

/// The retry delay the headers ask for, relative to `now` for absolute dates.
pub fn parse_retry_after<'h>(
    header: &dyn Fn(&str) -> Option<&'h str>,
    now: SystemTime,
) -> Option<Duration> {
    if let Some(d) = header("retry-after-ms").and_then(parse_millis) {
        return Some(d);
    }
    if let Some(v) = header("retry-after") {
        let from_seconds = parse_seconds(v);
        let from_date = || parse_http_date(v).map(|t| until(t, now));
        if let Some(d) = from_seconds.or_else(from_date) {
            return Some(d);
        }
    }
    let durations = DURATION_RESET_HEADERS
        .iter()
        .filter_map(|name| header(name).and_then(parse_go_duration));
    let timestamps = TIMESTAMP_RESET_HEADERS
        .iter()
        .filter_map(|name| header(name).and_then(parse_rfc3339))
        .map(|t| until(t, now));
    durations.chain(timestamps).max()
}

/// `retry-after-ms`: non-negative decimal milliseconds, e.g. `"1500"` or `"12.5"`.
pub fn parse_millis(s: &str) -> Option<Duration> {
    parse_decimal(s).and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
}

/// `retry-after` as delay-seconds; fractions are accepted (`"1.5"`), signs and exponents are not.
pub fn parse_seconds(s: &str) -> Option<Duration> {
    parse_decimal(s).and_then(|secs| Duration::try_from_secs_f64(secs).ok())
}

/// An OpenAI / Go duration string: `"1s"`, `"6m0s"`, `"20ms"`, `"1h2m3.5s"`, `"0"`.
/// Units: `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`. No sign.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value = parse_decimal(&rest[..end])?;
        rest = &rest[end..];
        // Longest unit first: "ms" must win over "m".
        let units: [(&str, f64); 8] = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("\u{b5}s", 1e-6),
            ("\u{3bc}s", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ];
        let (unit, scale) = units.iter().find(|(u, _)| rest.starts_with(u))?;
        rest = &rest[unit.len()..];
        total += value * scale;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// An HTTP-date (RFC 9110 §5.6.7): IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, and the obsolete
/// `Sunday, 06-Nov-94 08:49:37 GMT` and `Sun Nov  6 08:49:37 1994` forms. The weekday must be a
/// weekday name but is not checked against the date. Two-digit years below 70 are 20xx.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    let cleaned = s.replace(',', " ");
    let tokens: Vec<&str> = cleaned.split_ascii_whitespace().collect();
    let (day, month, year, time) = match tokens.as_slice() {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        [wk, day, mon, year, time, "GMT"] if is_weekday(wk, false) && s.contains(',') => (
            number(day, 1, 2)?,
            month_number(mon)?,
            number(year, 4, 4)?,
            *time,
        ),
        // rfc850-date: Sunday, 06-Nov-94 08:49:37 GMT
        [wk, date, time, "GMT"] if is_weekday(wk, true) => {
            let mut parts = date.split('-');
            let (d, m, y) = (parts.next()?, parts.next()?, parts.next()?);
            if parts.next().is_some() {
                return None;
            }
            let yy = number(y, 2, 2)?;
            let year = if yy < 70 { 2000 + yy } else { 1900 + yy };
            (number(d, 2, 2)?, month_number(m)?, year, *time)
        }
        // asctime-date: Sun Nov  6 08:49:37 1994
        [wk, mon, day, time, year] if is_weekday(wk, false) && !s.contains(',') => (
            number(day, 1, 2)?,
            month_number(mon)?,
            number(year, 4, 4)?,
            *time,
        ),
        _ => return None,
    };
    let (h, m, sec) = parse_hms(time)?;
    let days = days_since_epoch(year, month, day)?;
    from_unix(days * 86_400 + h * 3600 + m * 60 + sec, 0)
}

/// An RFC 3339 timestamp: `2024-05-01T12:00:30Z`, `2024-05-01T12:00:30.25+02:00` (also `t`/`z`
/// in lower case and a space instead of `T`).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    if !s.is_ascii() || s.len() < 20 {
        return None;
    }
    let b = s.as_bytes();
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let year = number(&s[0..4], 4, 4)?;
    let month = number(&s[5..7], 2, 2)?;
    let day = number(&s[8..10], 2, 2)?;
    let (h, m, sec) = parse_hms(&s[11..19])?;

    let mut rest = &s[19..];
    let mut nanos = 0_u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(frac.len());
        if digits == 0 {
            return None;
        }
        // Keep nanosecond precision; further digits are dropped.
        for (i, c) in frac[..digits].bytes().take(9).enumerate() {
            nanos += u32::from(c - b'0') * 10_u32.pow(8 - i as u32);
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            let hm = &rest[1..];
            if hm.len() != 5 || hm.as_bytes()[2] != b':' {
                return None;
            }
            let oh = number(&hm[0..2], 2, 2)?;
            let om = number(&hm[3..5], 2, 2)?;
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = days_since_epoch(year, month, day)?;
    from_unix(days * 86_400 + h * 3600 + m * 60 + sec - offset, nanos)
}

/// Digits with at most one `.`, surrounding whitespace allowed: a plain non-negative decimal.
fn parse_decimal(s: &str) -> Option<f64> {
    let t = s.trim();
    let digits = t.bytes().filter(u8::is_ascii_digit).count();
    let dots = t.bytes().filter(|&c| c == b'.').count();
    if digits == 0 || dots > 1 || digits + dots != t.len() {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn until(t: SystemTime, now: SystemTime) -> Duration {
    t.duration_since(now).unwrap_or(Duration::ZERO)
}

/// A decimal of `min..=max` ASCII digits.
fn number(s: &str, min: usize, max: usize) -> Option<i64> {
    if s.len() < min || s.len() > max || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `HH:MM:SS`, with 60 allowed as a leap second.
fn parse_hms(s: &str) -> Option<(i64, i64, i64)> {
    let mut parts = s.split(':');
    let h = number(parts.next()?, 2, 2)?;
    let m = number(parts.next()?, 2, 2)?;
    let sec = number(parts.next()?, 2, 2)?;
    if parts.next().is_some() || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some((h, m, sec))
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

fn month_number(s: &str) -> Option<i64> {
    let i = MONTHS.iter().position(|m| s.eq_ignore_ascii_case(m))?;
    Some(i as i64 + 1)
}

/// `long`: the full name (`Sunday`); otherwise the three-letter one (`Sun`).
fn is_weekday(s: &str, long: bool) -> bool {
    WEEKDAYS.iter().any(|day| {
        if long {
            s.eq_ignore_ascii_case(day)
        } else {
            s.eq_ignore_ascii_case(&day[..3])
        }
    })
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given date (negative before), for years 1–9999.
fn days_since_epoch(year: i64, month: i64, day: i64) -> Option<i64> {
    if !(1..=9999).contains(&year) || !(1..=12).contains(&month) {
        return None;
    }
    if day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // Days from 0001-01-01 to January 1st of `y`.
    let year_start = |y: i64| {
        let p = y - 1;
        365 * p + p / 4 - p / 100 + p / 400
    };
    let day_of_year: i64 = (1..month).map(|m| days_in_month(year, m)).sum::<i64>() + day - 1;
    Some(year_start(year) - year_start(1970) + day_of_year)
}

fn from_unix(secs: i64, nanos: u32) -> Option<SystemTime> {
    if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::new(secs.unsigned_abs(), nanos))
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
            .checked_add(Duration::from_nanos(u64::from(nanos)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn at(unix: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(unix)
    }

    /// 1994-11-06T08:49:37Z, the RFC's example date.
    const RFC_EXAMPLE: u64 = 784_111_777;

    fn retry(headers: &[(&str, &str)], now: SystemTime) -> Option<Duration> {
        let map: HashMap<String, String> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = |name: &str| map.get(name).map(String::as_str);
        parse_retry_after(&lookup, now)
    }

    #[test]
    fn retry_after_ms_is_float_milliseconds() {
        assert_eq!(
            retry(&[("retry-after-ms", "1500")], at(0)),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry(&[("retry-after-ms", "12.5")], at(0)),
            Some(Duration::from_micros(12_500))
        );
    }

    #[test]
    fn retry_after_seconds_integer_and_float() {
        assert_eq!(
            retry(&[("retry-after", "30")], at(0)),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry(&[("retry-after", " 1.5 ")], at(0)),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(retry(&[("retry-after", "0")], at(0)), Some(Duration::ZERO));
    }

    #[test]
    fn retry_after_http_date_is_relative_to_now() {
        let now = at(RFC_EXAMPLE - 20);
        for v in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                retry(&[("retry-after", v)], now),
                Some(Duration::from_secs(20)),
                "{v}"
            );
        }
        // A date in the past means "now".
        assert_eq!(
            retry(
                &[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")],
                at(RFC_EXAMPLE + 5)
            ),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn http_dates_convert_exactly() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(at(RFC_EXAMPLE))
        );
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        // Leap day, and a two-digit year in the 2000s.
        assert_eq!(
            parse_http_date("Thu, 29 Feb 2024 12:00:00 GMT"),
            Some(at(1_709_208_000))
        );
        assert_eq!(
            parse_http_date("Thursday, 29-Feb-24 12:00:00 GMT"),
            Some(at(1_709_208_000))
        );
        for bad in [
            "",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Xyz, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun 06 Nov 1994 08:49:37 GMT",
            "tomorrow",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn rfc3339_timestamps() {
        assert_eq!(parse_rfc3339("1994-11-06T08:49:37Z"), Some(at(RFC_EXAMPLE)));
        assert_eq!(
            parse_rfc3339("1994-11-06T10:49:37+02:00"),
            Some(at(RFC_EXAMPLE))
        );
        assert_eq!(
            parse_rfc3339("1994-11-06t03:49:37-05:00"),
            Some(at(RFC_EXAMPLE))
        );
        assert_eq!(
            parse_rfc3339("1994-11-06 08:49:37.25z"),
            Some(at(RFC_EXAMPLE) + Duration::from_millis(250))
        );
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59Z"),
            UNIX_EPOCH.checked_sub(Duration::from_secs(1))
        );
        for bad in [
            "",
            "1994-11-06",
            "1994-11-06T08:49:37",
            "1994-11-06T08:49:37.Z",
            "1994-13-06T08:49:37Z",
            "1994-11-06T08:49:37+0200",
            "1994-11-06X08:49:37Z",
            "1994-11-06T08:49:37Zjunk",
            "19a4-11-06T08:49:37Z",
            "1994-11-06T08:49:37\u{b5}",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn openai_duration_strings() {
        let cases = [
            ("1s", Duration::from_secs(1)),
            ("6m0s", Duration::from_secs(360)),
            ("20ms", Duration::from_millis(20)),
            ("1h2m3.5s", Duration::from_millis(3_723_500)),
            ("0.5s", Duration::from_millis(500)),
            ("0", Duration::ZERO),
            ("7.66s", Duration::from_millis(7660)),
            ("250us", Duration::from_micros(250)),
            ("250\u{b5}s", Duration::from_micros(250)),
            ("100ns", Duration::from_nanos(100)),
        ];
        for (s, d) in cases {
            let got = parse_go_duration(s).unwrap_or_else(|| panic!("{s:?} should parse"));
            let diff = got.abs_diff(d);
            assert!(diff < Duration::from_micros(1), "{s:?}: {got:?} != {d:?}");
        }
        for bad in [
            "", "s", "1", "1x", "-1s", "1.2.3s", "1s2", "ms", "1 s", "+1s",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reset_headers_take_the_largest() {
        let now = at(RFC_EXAMPLE - 90);
        assert_eq!(
            retry(
                &[
                    ("x-ratelimit-reset-requests", "1s"),
                    ("x-ratelimit-reset-tokens", "6m0s"),
                ],
                now
            ),
            Some(Duration::from_secs(360))
        );
        assert_eq!(
            retry(
                &[
                    ("x-ratelimit-reset-requests", "20ms"),
                    ("anthropic-ratelimit-tokens-reset", "1994-11-06T08:49:37Z"),
                    ("anthropic-ratelimit-requests-reset", "1994-11-06T08:48:37Z"),
                ],
                now
            ),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            retry(
                &[(
                    "anthropic-ratelimit-output-tokens-reset",
                    "1994-11-06T08:49:37Z"
                )],
                now
            ),
            Some(Duration::from_secs(90))
        );
    }

    #[test]
    fn precedence_is_ms_then_retry_after_then_resets() {
        let all = [
            ("retry-after-ms", "250"),
            ("retry-after", "7"),
            ("x-ratelimit-reset-tokens", "1m"),
        ];
        assert_eq!(retry(&all, at(0)), Some(Duration::from_millis(250)));
        assert_eq!(retry(&all[1..], at(0)), Some(Duration::from_secs(7)));
        assert_eq!(retry(&all[2..], at(0)), Some(Duration::from_secs(60)));
        // A header that does not parse is skipped, not fatal.
        assert_eq!(
            retry(&[("retry-after-ms", "soon"), ("retry-after", "7")], at(0)),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn garbage_is_none() {
        assert_eq!(retry(&[], at(0)), None);
        for v in [
            "", " ", "-5", "+5", "1e3", "inf", "NaN", "5s", "1.2.3", "0x10", "soon",
        ] {
            assert_eq!(
                retry(&[("retry-after", v)], at(0)),
                None,
                "retry-after {v:?}"
            );
            assert_eq!(
                retry(&[("retry-after-ms", v)], at(0)),
                None,
                "retry-after-ms {v:?}"
            );
        }
        assert_eq!(
            retry(
                &[
                    ("x-ratelimit-reset-requests", "later"),
                    ("anthropic-ratelimit-tokens-reset", "tomorrow")
                ],
                at(0)
            ),
            None
        );
        // Absurdly large numbers are garbage, not a panic.
        let huge = "9".repeat(400);
        assert_eq!(retry(&[("retry-after", &huge)], at(0)), None);
        assert_eq!(parse_go_duration(&format!("{huge}h")), None);
    }
}
