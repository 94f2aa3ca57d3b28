//! Pass options: plain structs with defaults, settable by `key=value` strings from a driver.

use crate::PassError;

/// One option of a pass, for `tessera passes` and error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionDoc {
    pub key: &'static str,
    /// The default, as it would be written on the command line.
    pub default: &'static str,
    pub doc: &'static str,
}

/// The options struct of a pass. `Default` gives the documented defaults.
pub trait PassOptions: Default {
    /// Every key [`PassOptions::set`] accepts.
    const DOCS: &'static [OptionDoc];

    /// Sets one option from its text form; the error says what was expected.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String>;

    /// Builds the options from `(key, value)` pairs, starting from the defaults.
    fn from_pairs(pass: &str, pairs: &[(String, String)]) -> Result<Self, PassError> {
        let mut o = Self::default();
        for (k, v) in pairs {
            o.set(k, v).map_err(|message| PassError::BadOption {
                option: format!("{pass}.{k}={v}"),
                message,
            })?;
        }
        Ok(o)
    }
}

/// Options of a pass that has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoOptions;

impl PassOptions for NoOptions {
    const DOCS: &'static [OptionDoc] = &[];
    fn set(&mut self, key: &str, _value: &str) -> Result<(), String> {
        Err(format!("this pass has no options (got `{key}`)"))
    }
}

/// `true`/`false` (also `1`/`0`).
pub fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("expected true or false, found `{value}`")),
    }
}

/// One flag (`true`) or a braced list of them (`{true,false}`): exactly one pair of braces
/// around a non-empty, comma-separated list; `{true`, `true}`, `{{true}}` and `{}` are refused.
pub fn parse_bool_list(value: &str) -> Result<Vec<bool>, String> {
    let bad = |why: &str| {
        format!("expected true, false or a list {{true,false,...}}, found `{value}` ({why})")
    };
    let v = value.trim();
    let inner = match (v.strip_prefix('{'), v.ends_with('}')) {
        (Some(rest), true) => &rest[..rest.len() - 1],
        (None, false) => return Ok(vec![parse_bool(v).map_err(|_| bad("not a flag"))?]),
        _ => return Err(bad("unbalanced braces")),
    };
    if inner.contains(['{', '}']) {
        return Err(bad("nested braces"));
    }
    inner
        .split(',')
        .map(|x| parse_bool(x.trim()).map_err(|e| bad(&e)))
        .collect()
}

/// A decimal integer, with an optional `K`, `M` or `G` (powers of 1024) suffix for sizes.
pub fn parse_int(value: &str) -> Result<i64, String> {
    let (digits, mult) = match value.as_bytes().last() {
        Some(b'K' | b'k') => (&value[..value.len() - 1], 1i64 << 10),
        Some(b'M' | b'm') => (&value[..value.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&value[..value.len() - 1], 1 << 30),
        _ => (value, 1),
    };
    digits
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("expected an integer (optionally with K, M or G), found `{value}`"))
}

/// Error for a key a pass does not know, listing the ones it does.
pub fn unknown_key(key: &str, docs: &[OptionDoc]) -> String {
    let known: Vec<&str> = docs.iter().map(|d| d.key).collect();
    if known.is_empty() {
        format!("unknown option `{key}`: this pass has no options")
    } else {
        format!("unknown option `{key}`; known: {}", known.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_values() {
        assert_eq!(parse_bool("true"), Ok(true));
        assert!(parse_bool("yes").is_err());
        assert_eq!(parse_int("12K"), Ok(12288));
        assert_eq!(parse_int("-3"), Ok(-3));
        assert!(parse_int("x").unwrap_err().contains("found `x`"));
    }

    #[test]
    fn bool_lists_are_strict() {
        assert_eq!(parse_bool_list("true"), Ok(vec![true]));
        assert_eq!(parse_bool_list("{true}"), Ok(vec![true]));
        assert_eq!(parse_bool_list("{true, false}"), Ok(vec![true, false]));
        for bad in [
            "{true",
            "true}",
            "{{true}}",
            "{}",
            "{true,}",
            "",
            "{true}}",
            "yes",
            "{true false}",
        ] {
            let e = parse_bool_list(bad).unwrap_err();
            assert!(e.contains(&format!("found `{bad}`")), "{bad}: {e}");
        }
    }
}
