//! Ids and exact decimals as JSON strings. A [`DecimalStr`] refuses JSON numbers (they pass
//! through a float in many clients); an [`IdStr`] is 1..=20 digits that fit a u64.

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest decimal string accepted, bytes.
pub const MAX_DECIMAL_STR_BYTES: usize = 40;

/// Whether `s` is written as a plain decimal: `-?(0|[1-9][0-9]*)(\.[0-9]+)?` — a JSON number
/// without exponent (no `+`, no leading zeros, no `_`, no bare `.5` or `5.`). The API's
/// schemas state the same grammar, so what a client can check is what the server accepts.
pub fn plain_decimal(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    all_digits(int) && (int == "0" || !int.starts_with('0')) && frac.is_none_or(all_digits)
}

/// A decimal amount sent as a JSON string (`"18.50"`), parsed exactly. JSON numbers, exponents,
/// a leading `+`, leading zeros and digit separators are refused ([`plain_decimal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecimalStr(pub Decimal);

impl<'de> Deserialize<'de> for DecimalStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = DecimalStr;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a decimal string such as \"18.50\" (numbers are refused)")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<DecimalStr, E> {
                if s.len() > MAX_DECIMAL_STR_BYTES {
                    return Err(E::custom(format!(
                        "a decimal string is at most {MAX_DECIMAL_STR_BYTES} characters \
                         ({} given)",
                        s.len()
                    )));
                }
                if !plain_decimal(s) {
                    return Err(E::custom(format!("{s:?} is not a plain decimal string")));
                }
                // A plain decimal that does not fit: say so, not "not a decimal" (issue 25).
                Decimal::from_str_exact(s).map(DecimalStr).map_err(|_| {
                    E::custom(format!(
                        "{s:?} is out of range: at most 28 significant digits (amounts are far \
                         smaller: see the field's limit)"
                    ))
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl Serialize for DecimalStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl std::str::FromStr for DecimalStr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|e| e.to_string())
    }
}

/// An engine id sent as a JSON string of digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdStr(pub u64);

impl<'de> Deserialize<'de> for IdStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = IdStr;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an id as a string of digits")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<IdStr, E> {
                parse_id(s)
                    .map(IdStr)
                    .ok_or_else(|| E::custom(format!("{s:?} is not an id")))
            }
        }
        d.deserialize_str(V)
    }
}

impl Serialize for IdStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl std::fmt::Display for IdStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Parses an id: 1..=20 ASCII digits that fit a u64.
pub fn parse_id(s: &str) -> Option<u64> {
    (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {

    /// Found in issue 25's pass: a huge deposit answered "not a decimal string".
    #[test]
    fn out_of_range_and_overlong_decimals_say_so() {
        let e = serde_json::from_str::<DecimalStr>(r#""99999999999999999999999999999999""#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
        let long = format!("\"{}\"", "1".repeat(MAX_DECIMAL_STR_BYTES + 1));
        let e = serde_json::from_str::<DecimalStr>(&long)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 40 characters"), "{e}");
        let e = serde_json::from_str::<DecimalStr>(r#""1e5""#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a plain decimal"), "{e}");
        assert_eq!(
            serde_json::from_str::<DecimalStr>(r#""18.50""#)
                .unwrap()
                .0
                .to_string(),
            "18.50"
        );
    }

    use super::*;

    #[test]
    fn decimal_strings_are_exact_and_numbers_refused() {
        let d: DecimalStr = serde_json::from_str("\"18.5000\"").unwrap();
        assert_eq!(d.0, Decimal::new(185_000, 4));
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"18.5000\"");
        for bad in [
            "18.5",
            "1e3",
            "\"1e3\"",
            "\"\"",
            "\"+1\"",
            "\"abc\"",
            "null",
            "\"018.5\"",
            "\"1_000\"",
            "\".5\"",
            "\"5.\"",
            "\"-\"",
            "\"1.2.3\"",
            "\" 1\"",
        ] {
            assert!(serde_json::from_str::<DecimalStr>(bad).is_err(), "{bad}");
        }
        assert_eq!(
            "20.00".parse::<DecimalStr>().unwrap().0,
            Decimal::new(2000, 2)
        );
        assert!("2e1".parse::<DecimalStr>().is_err());
        for good in ["0", "0.5", "-3", "100000.0000", "18.50000"] {
            assert!(good.parse::<DecimalStr>().is_ok(), "{good}");
        }
    }

    #[test]
    fn ids_are_digit_strings_both_ways() {
        let id: IdStr = serde_json::from_str("\"123\"").unwrap();
        assert_eq!(id.0, 123);
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"123\"");
        for bad in [
            "123",
            "\"-1\"",
            "\"18446744073709551616\"",
            "\"1a\"",
            "\"\"",
        ] {
            assert!(serde_json::from_str::<IdStr>(bad).is_err(), "{bad}");
        }
    }
}
