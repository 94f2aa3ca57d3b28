//! The device mesh the pass shards over: named axes whose sizes multiply to the number of
//! partitions, devices numbered row-major over the axes (XLA's iota mesh).

use std::fmt;

/// A device mesh: named axes, major first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceMesh {
    pub axes: Vec<(String, i64)>,
}

/// Why a `--mesh` was refused; the message names the text and what was expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MeshError {
    #[error("--mesh `{text}`: {what}")]
    Syntax { text: String, what: String },
    #[error(
        "--mesh `{text}`: its axes multiply to {product} devices, but the module is partitioned \
         over {devices} (num_partitions): give axes whose sizes multiply to {devices}"
    )]
    Devices {
        text: String,
        product: i64,
        devices: i64,
    },
}

impl DeviceMesh {
    /// The 1-D mesh `x=N`.
    pub fn one_d(devices: i64) -> DeviceMesh {
        DeviceMesh {
            axes: vec![("x".to_string(), devices)],
        }
    }

    /// Reads `data=2,model=4` and checks that the sizes multiply to `devices`.
    pub fn parse(text: &str, devices: i64) -> Result<DeviceMesh, MeshError> {
        let bad = |what: String| MeshError::Syntax {
            text: text.to_string(),
            what,
        };
        let mut axes: Vec<(String, i64)> = Vec::new();
        for (k, part) in text.split(',').enumerate() {
            let part = part.trim();
            let Some((name, size)) = part.split_once('=') else {
                return Err(bad(format!(
                    "axis {} `{part}`: expected NAME=SIZE (e.g. data=2,model=4)",
                    k + 1
                )));
            };
            let name = name.trim();
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(bad(format!(
                    "axis {} `{part}`: expected a name of letters, digits and `_` before `=`",
                    k + 1
                )));
            }
            let size: i64 = size.trim().parse().map_err(|_| {
                bad(format!(
                    "axis `{name}`: expected a positive integer size, found `{}`",
                    size.trim()
                ))
            })?;
            if size < 1 {
                return Err(bad(format!(
                    "axis `{name}`: expected a positive size, found {size}"
                )));
            }
            if axes.iter().any(|(n, _)| n == name) {
                return Err(bad(format!("axis `{name}` is named twice")));
            }
            axes.push((name.to_string(), size));
        }
        let product = axes
            .iter()
            .try_fold(1i64, |p, (_, s)| p.checked_mul(*s))
            .unwrap_or(i64::MAX);
        if product != devices {
            return Err(MeshError::Devices {
                text: text.to_string(),
                product,
                devices,
            });
        }
        Ok(DeviceMesh { axes })
    }

    pub fn sizes(&self) -> Vec<i64> {
        self.axes.iter().map(|a| a.1).collect()
    }

    pub fn num_devices(&self) -> i64 {
        self.axes.iter().map(|a| a.1).product()
    }
}

impl fmt::Display for DeviceMesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, (n, s)) in self.axes.iter().enumerate() {
            if k > 0 {
                write!(f, ",")?;
            }
            write!(f, "{n}={s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let m = DeviceMesh::parse("data=2, model=4", 8).unwrap();
        assert_eq!(m.sizes(), vec![2, 4]);
        assert_eq!(m.to_string(), "data=2,model=4");
        let e = DeviceMesh::parse("data=2,model=2", 8)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("multiply to 4 devices") && e.contains("over 8"),
            "{e}"
        );
        let e = DeviceMesh::parse("data=0,model=8", 8)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected a positive size, found 0"), "{e}");
        let e = DeviceMesh::parse("data:8", 8).unwrap_err().to_string();
        assert!(e.contains("expected NAME=SIZE"), "{e}");
        let e = DeviceMesh::parse("a=x", 8).unwrap_err().to_string();
        assert!(e.contains("found `x`"), "{e}");
        let e = DeviceMesh::parse("a=2,a=4", 8).unwrap_err().to_string();
        assert!(e.contains("named twice"), "{e}");
    }
}
