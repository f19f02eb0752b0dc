//! Values typed on the command line, checked before anything is sent (clap `value_parser`s
//! answer usage errors, exit 2). Prices and amounts stay decimal strings exactly as typed:
//! they are checked for form here and never pass through a float; the server checks the rest
//! (docs/api.md §1.2).

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone};
use gpux_wire::DecimalStr;
use std::time::Duration;

/// Most decimals of a price: prices are whole 0.0001 CNY ticks (docs/api.md §1.2).
pub const PRICE_MAX_DECIMALS: u32 = 4;
/// Most decimals of a deposit or payout amount (docs/api.md §1.2).
pub const AMOUNT_MAX_DECIMALS: u32 = 2;

fn positive_decimal(s: &str, max_decimals: u32, what: &str) -> Result<DecimalStr, String> {
    let d: DecimalStr = s
        .parse()
        .map_err(|_| format!("{s:?} is not a decimal number such as \"20.50\""))?;
    if d.0.is_sign_negative() || d.0.is_zero() {
        return Err(format!("{what} must be above 0, not {s}"));
    }
    if d.0.scale() > max_decimals {
        return Err(format!(
            "{what} takes at most {max_decimals} decimals, not {s}"
        ));
    }
    Ok(d)
}

/// A price in CNY per GPU-hour: a positive decimal with at most 4 decimals (`20.50`).
pub fn price(s: &str) -> Result<DecimalStr, String> {
    positive_decimal(s, PRICE_MAX_DECIMALS, "a price")
}

/// An amount in CNY: a positive decimal with at most 2 decimals (`1000.00`).
pub fn amount(s: &str) -> Result<DecimalStr, String> {
    positive_decimal(s, AMOUNT_MAX_DECIMALS, "an amount")
}

/// An id: 1..=20 digits fitting a u64.
pub fn id(s: &str) -> Result<u64, String> {
    gpux_wire::parse_id(s).ok_or_else(|| format!("{s:?} is not an id (a string of digits)"))
}

/// A parser of a whole number above 0 named `what` (`--gpus`, `--disk-gb`): `-2`, `0` and
/// `two` get a message that says what is wanted, not clap's `-- -2` tip (the argument allows
/// negative numbers so that they reach this parser).
pub fn positive(what: &'static str) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync {
    move |s: &str| match s.trim().parse::<i128>() {
        Ok(n) if n <= 0 => Err(format!("{what} must be a positive number, not {s}")),
        Ok(n) => u32::try_from(n).map_err(|_| format!("{what} is too large: {s}")),
        Err(_) => Err(format!(
            "{what} must be a positive number (digits, such as 2), not {s:?}"
        )),
    }
}

/// A gang's shape `NODESxGPUS` (`8x8`: eight nodes of 8 GPUs; `×` and `X` too): nodes at
/// least 1, GPUs per node 1..=16, at most 1024 GPUs in all.
pub fn gang(s: &str) -> Result<(u32, u32), String> {
    let bad = || {
        format!(
            "--gang is NODESxGPUS, e.g. 8x8 (eight nodes of 8 GPUs each: 1–16 GPUs per node, at \
             most 1024 GPUs in all), not {s:?}"
        )
    };
    let t = s.trim().replace(['X', '×'], "x");
    let (n, g) = t.split_once('x').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let g: u32 = g.trim().parse().map_err(|_| bad())?;
    if n == 0 || g == 0 || g > 16 || u64::from(n) * u64::from(g) > 1024 {
        return Err(bad());
    }
    Ok((n, g))
}

/// A duration in humantime form: `90s`, `15m`, `2h`, `1h 30m`, `7days`.
pub fn duration(s: &str) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 90s, 2h, 7days)"))?;
    if d.is_zero() {
        return Err("a duration must be above 0".into());
    }
    Ok(d)
}

/// An SLA credit cap (issue 26): `charge` (the lease's charge so far) or a percentage of the
/// monthly fee, `50%`.
pub fn sla_cap(s: &str) -> Result<gpux_wire::CreditCapDto, String> {
    if s == "charge" || s == "charge_so_far" {
        return Ok(gpux_wire::CreditCapDto::ChargeSoFar);
    }
    s.strip_suffix('%')
        .and_then(|p| p.parse::<u8>().ok())
        .map(gpux_wire::CreditCapDto::MonthlyFeePct)
        .ok_or_else(|| format!("{s:?}: `charge` or a percentage of the monthly fee, e.g. 50%"))
}

/// Whole seconds of a duration, rounded up (a lease term is whole seconds).
pub fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `KEY=VALUE` (an environment variable of a launch spec).
pub fn env_var(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected KEY=VALUE"))?;
    let name_ok = k
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !name_ok {
        return Err(format!(
            "{k:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

/// An IANA time zone such as `Asia/Shanghai`.
pub fn time_zone(s: &str) -> Result<chrono_tz::Tz, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not an IANA time zone (e.g. Asia/Shanghai, UTC)"))
}

/// A calendar month `YYYY-MM`: its first day.
pub fn month(s: &str) -> Result<NaiveDate, String> {
    let shaped = s.len() == 7 && s.as_bytes()[4] == b'-';
    shaped
        .then(|| NaiveDate::parse_from_str(&format!("{s}-01"), "%Y-%m-%d").ok())
        .flatten()
        .ok_or_else(|| format!("{s:?}: expected a month as YYYY-MM, e.g. 2026-11"))
}

/// The first day of the month after the one `first` starts.
pub fn next_month(first: NaiveDate) -> Option<NaiveDate> {
    first.checked_add_months(chrono::Months::new(1))
}

/// A point in time as typed: RFC 3339 with an offset, or local to a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimeArg {
    /// ms since the Unix epoch (typed as digits, or RFC 3339 with an offset).
    Ms(i64),
    /// `YYYY-MM-DD` (midnight) or `YYYY-MM-DDTHH:MM:SS`, local to the zone it is used with.
    Local(NaiveDateTime),
}

/// A time: ms since epoch (digits), RFC 3339 (`2026-05-01T08:00:00Z`,
/// `2026-05-01T08:00:00+08:00`), or local `2026-05-01` / `2026-05-01T08:00:00`.
pub fn time(s: &str) -> Result<TimeArg, String> {
    if let Some(ms) = gpux_wire::parse_id(s) {
        return i64::try_from(ms)
            .map(TimeArg::Ms)
            .map_err(|_| format!("{s}: out of range"));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(TimeArg::Ms(t.timestamp_millis()));
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(TimeArg::Local(d.and_hms_opt(0, 0, 0).expect("midnight")));
    }
    for f in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Ok(TimeArg::Local(t));
        }
    }
    Err(format!(
        "{s:?}: expected YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS, RFC 3339 (2026-05-01T08:00:00+08:00) \
         or ms since epoch"
    ))
}

/// A time as [`time`] reads it, or `now`: the current time, read once when the command line
/// is parsed.
pub fn time_or_now(s: &str) -> Result<TimeArg, String> {
    if s.eq_ignore_ascii_case("now") {
        return Ok(TimeArg::Ms(chrono::Utc::now().timestamp_millis()));
    }
    time(s).map_err(|e| format!("{e}, or now"))
}

impl TimeArg {
    /// ms since epoch, a local time read in `tz`. A local time that occurs twice (clocks going
    /// back) takes the earlier instant; one that does not exist (clocks going forward) is an
    /// error naming it.
    pub fn to_ms<Z: TimeZone>(&self, tz: &Z) -> Result<i64, String> {
        match self {
            TimeArg::Ms(ms) => Ok(*ms),
            TimeArg::Local(t) => tz
                .from_local_datetime(t)
                .earliest()
                .map(|t| t.timestamp_millis())
                .ok_or_else(|| format!("{t} does not exist in that time zone (a clock change)")),
        }
    }

    /// The form the report API takes: digits for an instant, the local text for a local time
    /// (the server reads it in the report's `tz`, docs/api.md §4).
    pub fn to_query(&self) -> String {
        match self {
            TimeArg::Ms(ms) => ms.to_string(),
            TimeArg::Local(t) => t.format("%Y-%m-%dT%H:%M:%S").to_string(),
        }
    }
}

/// Reads an OpenSSH public key file (`~/.ssh/id_ed25519.pub`): its one key line. Refuses a
/// private key (a common slip) and anything that is not a public key line.
pub fn ssh_public_key(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read SSH key {}: {e}", path.display()))?;
    if text.contains("PRIVATE KEY") {
        return Err(format!(
            "{} is a private key: pass the public one ({}.pub)",
            path.display(),
            path.display()
        ));
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let [line] = lines.as_slice() else {
        return Err(format!(
            "{} holds {} key lines; pass one public key per --ssh-key",
            path.display(),
            lines.len()
        ));
    };
    let mut parts = line.split_whitespace();
    let (Some(kind), Some(_blob)) = (parts.next(), parts.next()) else {
        return Err(format!("{} is not an OpenSSH public key", path.display()));
    };
    let known =
        kind.starts_with("ssh-") || kind.starts_with("ecdsa-sha2-") || kind.starts_with("sk-");
    if !known {
        return Err(format!(
            "{}: {kind:?} is not an OpenSSH public key type (ssh-ed25519, ssh-rsa, ecdsa-sha2-…)",
            path.display()
        ));
    }
    Ok((*line).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_a_positive_whole_number() {
        let gpus = positive("gpus");
        assert_eq!(gpus("2"), Ok(2));
        assert_eq!(
            gpus("-2").unwrap_err(),
            "gpus must be a positive number, not -2"
        );
        assert_eq!(
            gpus("0").unwrap_err(),
            "gpus must be a positive number, not 0"
        );
        assert!(gpus("two").unwrap_err().contains("positive number"));
        assert_eq!(
            gpus("4294967296").unwrap_err(),
            "gpus is too large: 4294967296"
        );
        let before = chrono::Utc::now().timestamp_millis();
        let TimeArg::Ms(now) = time_or_now("now").unwrap() else {
            panic!("now is an instant")
        };
        assert!(now >= before);
        assert_eq!(time_or_now("5"), Ok(TimeArg::Ms(5)));
    }

    #[test]
    fn prices_and_amounts_stay_as_typed() {
        assert_eq!(
            serde_json::to_string(&price("20.50").unwrap()).unwrap(),
            "\"20.50\""
        );
        assert_eq!(
            serde_json::to_string(&price("9").unwrap()).unwrap(),
            "\"9\""
        );
        assert_eq!(
            serde_json::to_string(&price("0.0001").unwrap()).unwrap(),
            "\"0.0001\""
        );
        assert!(price("0.00001").unwrap_err().contains("at most 4 decimals"));
        assert!(price("0").unwrap_err().contains("above 0"));
        assert!(price("-1").is_err());
        assert!(price("1e3").is_err());
        assert!(price("+1").is_err());
        assert!(price("abc").is_err());
        assert_eq!(
            serde_json::to_string(&amount("1000.00").unwrap()).unwrap(),
            "\"1000.00\""
        );
        assert!(amount("1.001").unwrap_err().contains("at most 2 decimals"));
    }

    #[test]
    fn months_are_yyyy_mm_and_roll_over_the_year() {
        let nov = month("2026-11").unwrap();
        assert_eq!(nov, NaiveDate::from_ymd_opt(2026, 11, 1).unwrap());
        let dec = month("2026-12").unwrap();
        assert_eq!(
            next_month(dec),
            Some(NaiveDate::from_ymd_opt(2027, 1, 1).unwrap())
        );
        for bad in ["2026-13", "2026-1", "26-11", "2026/11", "2026-11-01", ""] {
            assert!(month(bad).unwrap_err().contains("YYYY-MM"), "{bad}");
        }
    }

    #[test]
    fn durations_env_and_ids() {
        assert_eq!(duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert!(duration("0s").is_err());
        assert!(duration("soon").is_err());
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(env_var("A_1=x=y").unwrap(), ("A_1".into(), "x=y".into()));
        assert!(env_var("1A=x").is_err());
        assert!(env_var("novalue").is_err());
        assert_eq!(id("42").unwrap(), 42);
        assert!(id("4a").is_err());
    }

    #[test]
    fn times_in_every_form() {
        let sh = time_zone("Asia/Shanghai").unwrap();
        assert_eq!(
            time("1778572800000").unwrap(),
            TimeArg::Ms(1_778_572_800_000)
        );
        assert_eq!(
            time("2026-05-12T08:00:00Z").unwrap(),
            TimeArg::Ms(1_778_572_800_000)
        );
        assert_eq!(
            time("2026-05-12T16:00:00+08:00").unwrap(),
            TimeArg::Ms(1_778_572_800_000)
        );
        let local = time("2026-05-12T16:00:00").unwrap();
        assert_eq!(local.to_ms(&sh).unwrap(), 1_778_572_800_000);
        assert_eq!(local.to_query(), "2026-05-12T16:00:00");
        let day = time("2026-05-01").unwrap();
        assert_eq!(day.to_query(), "2026-05-01T00:00:00");
        assert_eq!(day.to_ms(&chrono::Utc).unwrap(), 1_777_593_600_000);
        assert!(time("May 1st").is_err());
        assert!(time_zone("Mars/Olympus").is_err());
        // Berlin skips 02:00–03:00 on 2026-03-29.
        let gap = time("2026-03-29T02:30:00").unwrap();
        assert!(gap.to_ms(&time_zone("Europe/Berlin").unwrap()).is_err());
    }

    #[test]
    fn ssh_key_files() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("id.pub");
        let line =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7t3CQcihrH/4tM1K41mGfGrkuwsCkbk7Z2fjczQzrv me@x";
        std::fs::write(&ok, format!("{line}\n")).unwrap();
        assert_eq!(ssh_public_key(&ok).unwrap(), line);
        let private = dir.path().join("id");
        std::fs::write(&private, "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
        assert!(
            ssh_public_key(&private)
                .unwrap_err()
                .contains("private key")
        );
        let junk = dir.path().join("junk");
        std::fs::write(&junk, "hello world\n").unwrap();
        assert!(ssh_public_key(&junk).is_err());
        assert!(
            ssh_public_key(&dir.path().join("missing"))
                .unwrap_err()
                .contains("cannot read")
        );
    }
}
