//! Duration strings: `"250ms"`, `"10s"`, `"5m"`, `"1h"`, `"1m30s"`.
//!
//! Parsed at compile time so a typo is a build error, not a lock that
//! silently lasts 10 ms instead of 10 s. Millisecond resolution matches what
//! Redis `PX` accepts, so there is no unit below `ms` and no fractions.

use std::fmt::Write as _;
use std::time::Duration;

/// Units from largest to smallest; a compound duration must follow this order.
const UNITS: &[(&str, u64)] = &[("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

pub const UNIT_LIST: &str = "`ms`, `s`, `m`, `h`";

/// Parses a duration string; the error is a complete, user-facing message.
pub fn parse(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err("empty duration: write a number and a unit, e.g. \"10s\"".into());
    }
    if text.chars().any(char::is_whitespace) {
        return Err(format!(
            "\"{text}\" contains spaces: write the number and unit together, e.g. \"10s\" or \"1m30s\""
        ));
    }
    let mut total_ms: u64 = 0;
    let mut rest = text;
    // Index into UNITS of the previous unit, to enforce largest-to-smallest order.
    let mut previous: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(format!(
                "\"{text}\" is not a duration: expected a whole number followed by a unit ({UNIT_LIST}), e.g. \"10s\""
            ));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after.len()
            - after
                .trim_start_matches(|c: char| !c.is_ascii_digit())
                .len();
        let (unit, after) = after.split_at(unit_len);
        let index = unit_index(text, number, unit)?;
        if previous.is_some_and(|p| index <= p) {
            return Err(format!(
                "\"{text}\": units must go from largest to smallest and appear once, e.g. \"1m30s\""
            ));
        }
        previous = Some(index);
        let amount = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(UNITS[index].1))
            .and_then(|ms| ms.checked_add(total_ms))
            .ok_or_else(|| format!("\"{text}\" is too large"))?;
        total_ms = amount;
        rest = after;
    }
    Ok(Duration::from_millis(total_ms))
}

fn unit_index(text: &str, number: &str, unit: &str) -> Result<usize, String> {
    if unit.is_empty() {
        return Err(format!(
            "\"{text}\" has no unit after `{number}`: write e.g. \"{number}s\" (units: {UNIT_LIST})"
        ));
    }
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "\"{text}\": fractions are not supported; use a smaller unit, e.g. \"1500ms\" for 1.5 s"
        ));
    }
    UNITS
        .iter()
        .position(|(name, _)| *name == unit)
        .ok_or_else(|| format!("unknown unit `{unit}` in \"{text}\": valid units are {UNIT_LIST}"))
}

/// Formats a duration the way a user would write it (`"1m30s"`), for messages.
pub fn format(duration: Duration) -> String {
    let mut ms = duration.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, factor) in UNITS {
        let factor = u128::from(*factor);
        let amount = ms / factor;
        if amount > 0 {
            // Writing to a String cannot fail.
            let _ = write!(out, "{amount}{unit}");
            ms %= factor;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_single_units() {
        assert_eq!(parse("250ms"), Ok(ms(250)));
        assert_eq!(parse("10s"), Ok(ms(10_000)));
        assert_eq!(parse("5m"), Ok(ms(300_000)));
        assert_eq!(parse("2h"), Ok(ms(7_200_000)));
        assert_eq!(parse("0s"), Ok(ms(0)));
        assert_eq!(parse("007s"), Ok(ms(7_000)));
    }

    #[test]
    fn parses_compound_durations() {
        assert_eq!(parse("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse("1h1m1s1ms"), Ok(ms(3_661_001)));
        assert_eq!(parse("1s500ms"), Ok(ms(1_500)));
    }

    fn error(text: &str) -> String {
        parse(text).expect_err(text)
    }

    #[test]
    fn rejects_unknown_units_naming_the_valid_ones() {
        let message = error("10x");
        assert!(message.contains("unknown unit `x`"), "{message}");
        assert!(message.contains("`ms`, `s`, `m`, `h`"), "{message}");
        assert!(error("10sec").contains("unknown unit `sec`"));
        assert!(error("1d").contains("unknown unit `d`"));
    }

    #[test]
    fn rejects_malformed_text() {
        assert!(error("").contains("empty duration"));
        assert!(error("10").contains("no unit after `10`"));
        assert!(error("1m30").contains("no unit after `30`"));
        assert!(error("s").contains("not a duration"));
        assert!(error("-5s").contains("not a duration"));
        assert!(error("10 s").contains("spaces"));
        assert!(error("1.5s").contains("fractions"));
        assert!(error("30s1m").contains("largest to smallest"));
        assert!(error("1s1s").contains("largest to smallest"));
        assert!(error("99999999999999999999s").contains("too large"));
        assert!(error("9999999999999999h").contains("too large"));
    }

    #[test]
    fn formats_like_user_input() {
        assert_eq!(format(ms(0)), "0s");
        assert_eq!(format(ms(250)), "250ms");
        assert_eq!(format(ms(90_000)), "1m30s");
        assert_eq!(format(ms(3_600_000)), "1h");
        assert_eq!(format(ms(1_500)), "1s500ms");
        for text in ["1h1m1s1ms", "10s", "5m"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }
}
