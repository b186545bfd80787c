//! Wall-clock helpers: Unix seconds for OpenAI/Anthropic `created` fields and RFC 3339
//! timestamps with nanoseconds for Ollama's `created_at`, without a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds and nanoseconds since the Unix epoch.
pub(crate) fn now() -> (u64, u32) {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(_) => (0, 0),
    }
}

pub(crate) fn unix_secs() -> u64 {
    now().0
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` for the current time.
pub(crate) fn rfc3339_now() -> String {
    let (secs, nanos) = now();
    rfc3339(secs, nanos)
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` (UTC), as Go's `time.Time` marshals.
pub(crate) fn rfc3339(secs: u64, nanos: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let frac = if nanos == 0 {
        String::new()
    } else {
        let s = format!(".{nanos:09}");
        s.trim_end_matches('0').to_string()
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil conversion.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(1_691_176_965, 499_127_000),
            "2023-08-04T19:22:45.499127Z"
        );
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00Z");
    }
}
