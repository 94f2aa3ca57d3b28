//! Pass names to constructors, and the `--passes` / `--pass-option` syntax.
//!
//! `--passes` is a comma-separated list of pass names; `fix(a,b,...)` groups passes into a
//! [`FixedPoint`]. `--pass-option NAME.KEY=VALUE` sets option KEY of every instance of pass NAME
//! in the list (`fix.max_iterations=N` for the fixed points). Unknown passes, unknown keys, bad
//! values and options for passes that are not in the list are errors.

use std::collections::BTreeMap;

use crate::options::{unknown_key, OptionDoc, PassOptions};
use crate::pipeline::{FixedPoint, Pipeline};
use crate::{Pass, PassError, Result};

/// A pass a registry can build by name.
pub trait RegisteredPass: Pass + Sized + 'static {
    type Options: PassOptions;
    const NAME: &'static str;
    /// One line for `tessera passes`.
    const DOC: &'static str;
    fn with_options(options: Self::Options) -> Self;
}

/// Builds a pass from its `(key, value)` options.
pub type MakePass = fn(&[(String, String)]) -> Result<Box<dyn Pass>>;

/// How to build one pass from its name and options.
#[derive(Clone, Copy)]
pub struct PassInfo {
    pub name: &'static str,
    pub doc: &'static str,
    pub options: &'static [OptionDoc],
    pub make: MakePass,
}

impl PassInfo {
    pub fn of<P: RegisteredPass>() -> PassInfo {
        PassInfo {
            name: P::NAME,
            doc: P::DOC,
            options: <P::Options as PassOptions>::DOCS,
            make: make_pass::<P>,
        }
    }
}

fn make_pass<P: RegisteredPass>(pairs: &[(String, String)]) -> Result<Box<dyn Pass>> {
    let o = P::Options::from_pairs(P::NAME, pairs)?;
    Ok(Box::new(P::with_options(o)))
}

/// One element of a parsed `--passes` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassSpec {
    Pass(String),
    Fix(Vec<PassSpec>),
}

/// The name `fix(...)` groups take in `--pass-option`.
pub const FIX: &str = "fix";

const FIX_DOCS: &[OptionDoc] = &[OptionDoc {
    key: "max_iterations",
    default: "25",
    doc: "rounds before a fix(...) group gives up",
}];

#[derive(Clone, Default)]
pub struct Registry {
    passes: BTreeMap<&'static str, PassInfo>,
    /// Short names: `alias` in `--passes` and as the `--pass-option` prefix means `target`.
    aliases: BTreeMap<&'static str, &'static str>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A registry with the generic passes of this crate.
    pub fn with_generic_passes() -> Registry {
        let mut r = Registry::new();
        crate::passes::register(&mut r);
        r
    }

    /// Adds a pass; a later registration of the same name replaces the earlier one.
    pub fn register(&mut self, info: PassInfo) -> &mut Registry {
        self.passes.insert(info.name, info);
        self
    }

    pub fn add<P: RegisteredPass>(&mut self) -> &mut Registry {
        self.register(PassInfo::of::<P>())
    }

    /// Lets `alias` stand for the registered pass `target`, in `--passes` and as the
    /// `--pass-option` prefix (`--pass-option remat.memory_limit=1M` for `rematerialization`).
    pub fn add_alias(&mut self, alias: &'static str, target: &'static str) -> &mut Registry {
        self.aliases.insert(alias, target);
        self
    }

    /// The pass `name` means, following an alias.
    pub fn resolve<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases.get(name).copied().unwrap_or(name)
    }

    pub fn get(&self, name: &str) -> Option<&PassInfo> {
        self.passes.get(self.resolve(name))
    }

    /// Every pass, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &PassInfo> {
        self.passes.values()
    }

    /// The listing `tessera passes` prints: name, doc, and options with defaults.
    pub fn describe(&self) -> String {
        let w = self
            .passes
            .keys()
            .map(|k| k.len())
            .max()
            .unwrap_or(0)
            .max(FIX.len() + 5);
        let mut out = String::new();
        for p in self.passes.values() {
            out.push_str(&format!("{:<w$}  {}\n", p.name, p.doc));
            for o in p.options {
                out.push_str(&format!(
                    "{:<w$}    --pass-option {}.{}={}  {}\n",
                    "", p.name, o.key, o.default, o.doc
                ));
            }
        }
        for (alias, target) in &self.aliases {
            out.push_str(&format!(
                "{alias:<w$}  short for `{target}` (passes and option prefixes)\n"
            ));
        }
        out.push_str(&format!(
            "{:<w$}  repeat the passes until none changes the module\n",
            "fix(...)"
        ));
        for o in FIX_DOCS {
            out.push_str(&format!(
                "{:<w$}    --pass-option {FIX}.{}={}  {}\n",
                "", o.key, o.default, o.doc
            ));
        }
        out
    }

    /// Builds a pipeline from `--passes` and `--pass-option` strings.
    pub fn build_pipeline(&self, passes: &str, options: &[String]) -> Result<Pipeline> {
        let specs = self.resolve_specs(parse_pass_list(passes)?);
        let mut opts: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for (pass, pairs) in parse_pass_options(options)? {
            opts.entry(self.resolve(&pass).to_string())
                .or_default()
                .extend(pairs);
        }
        // Every option must name a pass in the list, with a key it knows.
        let mut used = Vec::new();
        collect_names(&specs, &mut used);
        for (pass, pairs) in &opts {
            if !used.iter().any(|u| u == pass) {
                let (k, v) = &pairs[0];
                return Err(PassError::BadOption {
                    option: format!("{pass}.{k}={v}"),
                    message: format!("no pass `{pass}` in --passes"),
                });
            }
        }
        for name in &used {
            if name != FIX && self.get(name).is_none() {
                return Err(PassError::UnknownPass { name: name.clone() });
            }
        }
        let mut max_iterations = FixedPoint::DEFAULT_MAX_ITERATIONS;
        if let Some(pairs) = opts.get(FIX) {
            for (k, v) in pairs {
                let bad = |message: String| PassError::BadOption {
                    option: format!("{FIX}.{k}={v}"),
                    message,
                };
                match k.as_str() {
                    "max_iterations" => {
                        max_iterations = crate::options::parse_int(v)
                            .ok()
                            .and_then(|n| usize::try_from(n).ok())
                            .filter(|&n| n > 0)
                            .ok_or_else(|| {
                                bad(format!("expected a positive integer, found `{v}`"))
                            })?;
                    }
                    _ => return Err(bad(unknown_key(k, FIX_DOCS))),
                }
            }
        }
        let mut pipeline = Pipeline::new("opt");
        for spec in &specs {
            match spec {
                PassSpec::Pass(n) => {
                    pipeline.add_boxed(self.make(n, &opts)?);
                }
                PassSpec::Fix(inner) => {
                    let mut fp =
                        FixedPoint::new(fix_name(inner)).with_max_iterations(max_iterations);
                    for s in inner {
                        match s {
                            PassSpec::Pass(n) => fp.add_boxed(self.make(n, &opts)?),
                            PassSpec::Fix(_) => unreachable!("rejected by the parser"),
                        }
                    }
                    pipeline.add_fixed_point(fp);
                }
            }
        }
        Ok(pipeline)
    }

    fn resolve_specs(&self, specs: Vec<PassSpec>) -> Vec<PassSpec> {
        specs
            .into_iter()
            .map(|s| match s {
                PassSpec::Pass(n) => PassSpec::Pass(self.resolve(&n).to_string()),
                PassSpec::Fix(inner) => PassSpec::Fix(self.resolve_specs(inner)),
            })
            .collect()
    }

    fn make(
        &self,
        name: &str,
        opts: &BTreeMap<String, Vec<(String, String)>>,
    ) -> Result<Box<dyn Pass>> {
        let info = self
            .get(name)
            .ok_or_else(|| PassError::UnknownPass { name: name.into() })?;
        let pairs = opts.get(name).map(Vec::as_slice).unwrap_or(&[]);
        (info.make)(pairs)
    }
}

fn fix_name(inner: &[PassSpec]) -> String {
    let names: Vec<&str> = inner
        .iter()
        .map(|s| match s {
            PassSpec::Pass(n) => n.as_str(),
            PassSpec::Fix(_) => FIX,
        })
        .collect();
    format!("{FIX}({})", names.join(","))
}

fn collect_names(specs: &[PassSpec], out: &mut Vec<String>) {
    for s in specs {
        match s {
            PassSpec::Pass(n) => out.push(n.clone()),
            PassSpec::Fix(inner) => {
                out.push(FIX.to_string());
                collect_names(inner, out);
            }
        }
    }
}

/// Parses `a,b,fix(c,d),e`. Nested `fix` groups are refused (a group of groups is one group).
pub fn parse_pass_list(text: &str) -> Result<Vec<PassSpec>> {
    let err = |m: String| PassError::PassList(m);
    let mut out = Vec::new();
    let mut group: Option<Vec<PassSpec>> = None;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(err("empty pass list".into()));
    }
    loop {
        let end = rest.find([',', '(', ')']).unwrap_or(rest.len());
        let name = rest[..end].trim();
        let delim = rest[end..].chars().next();
        rest = if end < rest.len() {
            &rest[end + 1..]
        } else {
            ""
        };
        match delim {
            Some('(') => {
                if name != FIX {
                    return Err(err(format!(
                        "`(` after `{name}`: only `fix(...)` groups passes"
                    )));
                }
                if group.is_some() {
                    return Err(err("nested fix(...) groups".into()));
                }
                group = Some(Vec::new());
                continue;
            }
            Some(')') => {
                let Some(mut g) = group.take() else {
                    return Err(err("`)` without a `fix(`".into()));
                };
                if !name.is_empty() {
                    g.push(PassSpec::Pass(check_name(name)?));
                }
                if g.is_empty() {
                    return Err(err("empty fix() group".into()));
                }
                out.push(PassSpec::Fix(g));
                // After `)`: end, or a comma.
                let t = rest.trim_start();
                if t.is_empty() {
                    break;
                }
                match t.strip_prefix(',') {
                    Some(r) => rest = r,
                    None => return Err(err(format!("expected `,` after `)`, found `{t}`"))),
                }
                continue;
            }
            _ => {}
        }
        let spec = PassSpec::Pass(check_name(name)?);
        match group.as_mut() {
            Some(g) => g.push(spec),
            None => out.push(spec),
        }
        if delim.is_none() {
            break;
        }
    }
    if group.is_some() {
        return Err(err("unclosed fix(".into()));
    }
    Ok(out)
}

fn check_name(name: &str) -> Result<String> {
    if name.is_empty() {
        return Err(PassError::PassList("empty pass name".into()));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(PassError::PassList(format!("bad pass name `{name}`")));
    }
    Ok(name.to_string())
}

/// Parses `--pass-option` values `pass.key=value` into pairs per pass, in the order given.
pub fn parse_pass_options(options: &[String]) -> Result<BTreeMap<String, Vec<(String, String)>>> {
    let mut map: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for o in options {
        let bad = |m: &str| PassError::BadOption {
            option: o.clone(),
            message: m.into(),
        };
        let (lhs, value) = o
            .split_once('=')
            .ok_or_else(|| bad("expected PASS.KEY=VALUE"))?;
        let (pass, key) = lhs
            .split_once('.')
            .ok_or_else(|| bad("expected PASS.KEY=VALUE (no `.` before `=`)"))?;
        if pass.is_empty() || key.is_empty() {
            return Err(bad("expected PASS.KEY=VALUE"));
        }
        map.entry(pass.to_string())
            .or_default()
            .push((key.to_string(), value.to_string()));
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pass_lists() {
        let p = |s: &str| PassSpec::Pass(s.into());
        assert_eq!(parse_pass_list("dce").unwrap(), vec![p("dce")]);
        assert_eq!(
            parse_pass_list(" a, fix(b ,c), d ").unwrap(),
            vec![p("a"), PassSpec::Fix(vec![p("b"), p("c")]), p("d")]
        );
        assert_eq!(
            parse_pass_list("fix(a)").unwrap(),
            vec![PassSpec::Fix(vec![p("a")])]
        );
        for bad in [
            "",
            "a,,b",
            "fix(a",
            "a)",
            "fix(fix(a))",
            "x(a)",
            "fix()",
            "a b",
            "fix(a)b",
        ] {
            assert!(parse_pass_list(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn builds_pipelines_and_rejects_bad_options() {
        let r = Registry::with_generic_passes();
        let p = r
            .build_pipeline("dce,fix(tuple-simplify,dce)", &[])
            .unwrap();
        assert_eq!(p.pass_names(), ["dce", "fix(tuple-simplify,dce)"]);
        let ok = r.build_pipeline("dce", &["dce.remove_dead_computations=false".to_string()]);
        assert!(ok.is_ok());
        let e = |passes: &str, o: &str| {
            r.build_pipeline(passes, &[o.to_string()])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert_eq!(
            e("nope", "x.y=1"),
            "--pass-option `x.y=1`: no pass `x` in --passes"
        );
        assert!(e("nope", "nope.y=1").contains("unknown pass `nope`"));
        assert!(e("dce", "dce.bogus=1").contains("unknown option `bogus`"));
        assert!(e("dce", "dce.remove_dead_computations=maybe").contains("expected true or false"));
        assert!(e("dce", "dce").contains("expected PASS.KEY=VALUE"));
        assert!(e("fix(dce)", "fix.max_iterations=0").contains("positive integer"));
        assert!(r.describe().contains("flatten-call-graph"));
    }

    #[test]
    fn aliases_name_passes_and_option_prefixes() {
        let mut r = Registry::with_generic_passes();
        r.add_alias("d", "dce");
        let p = r
            .build_pipeline("d", &["d.remove_dead_computations=false".to_string()])
            .unwrap();
        assert_eq!(p.pass_names(), ["dce"]);
        // The full name and the alias address the same pass.
        assert!(r
            .build_pipeline("dce", &["d.remove_dead_computations=false".to_string()])
            .is_ok());
        let e = r
            .build_pipeline("d", &["d.bogus=1".to_string()])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown option `bogus`"), "{e}");
        assert!(r.describe().contains("short for `dce`"));
    }
}
