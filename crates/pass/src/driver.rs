//! The text-to-text entry point shared by `tessera opt` and the filetest runner, so a RUN line
//! in a test means exactly what the same command line means.
//!
//! [`OptSpec`] is what the command line says (`--passes`, `--pass-option`, `--dump-dir`);
//! [`OptSpec::from_run_line`] reads the same flags from a filetest's `// RUN:` line;
//! [`run_opt`] parses the module, builds the pipeline from the [`Registry`], runs it with the
//! verifier as invariant checker, and prints the result.

use std::path::PathBuf;

use tessera_hlo::Module;

use crate::pipeline::RunReport;
use crate::{PassError, Registry, Result};

/// Parses module text (`Err` carries a `line:col: message` text).
pub type ParseFn = fn(&str) -> std::result::Result<Module, String>;
/// Prints a module in XLA's text form.
pub type PrintFn = fn(&Module) -> String;
/// An invariant checker.
pub type VerifyFn = fn(&Module) -> std::result::Result<(), String>;

/// The text format and verifier the driver uses.
#[derive(Clone, Copy)]
pub struct Hooks {
    pub parse: ParseFn,
    pub print: PrintFn,
    /// Run on the input and after every pass that changed the module.
    pub verify: Option<VerifyFn>,
}

/// The parser, printer and verifier of `tessera_hlo`.
pub fn default_hooks() -> Hooks {
    Hooks {
        parse: |text| tessera_hlo::text::parse_module(text).map_err(|e| e.to_string()),
        print: |m| tessera_hlo::text::print_module(m, &tessera_hlo::text::PrintOptions::default()),
        verify: Some(|m| {
            tessera_hlo::verify::verify(m, &tessera_hlo::verify::VerifyOptions::default())
                .map_err(|e| e.to_string())
        }),
    }
}

/// What `tessera opt` was asked to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OptSpec {
    /// The `--passes` list (`a,b,fix(c,d)`).
    pub passes: String,
    /// `--pass-option` values, `pass.key=value`.
    pub pass_options: Vec<String>,
    pub dump_dir: Option<PathBuf>,
    /// Skip the invariant checkers (`--no-verify`).
    pub no_verify: bool,
}

impl OptSpec {
    /// Reads `tessera opt [FILE|%s] --passes X [--pass-option K=V]... [--no-verify]` (also the
    /// `--flag=value` spelling) from a RUN line; the text before `tessera` (`// RUN:`) and a
    /// trailing `| FileCheck %s` are ignored.
    pub fn from_run_line(line: &str) -> Result<OptSpec> {
        let bad = |m: String| PassError::PassList(format!("RUN line `{}`: {m}", line.trim()));
        let line = line.split('|').next().unwrap_or("");
        let mut words = line.split_whitespace().skip_while(|w| *w != "tessera");
        if words.next() != Some("tessera") || words.next() != Some("opt") {
            return Err(bad("expected `tessera opt ...`".into()));
        }
        let mut spec = OptSpec::default();
        let mut passes = None;
        let words: Vec<&str> = words.collect();
        let mut k = 0;
        while k < words.len() {
            let w = words[k];
            let (flag, inline) = match w.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v)),
                _ => (w, None),
            };
            let mut value = || -> Result<String> {
                if let Some(v) = inline {
                    return Ok(v.to_string());
                }
                k += 1;
                words
                    .get(k)
                    .map(|v| v.to_string())
                    .ok_or_else(|| bad(format!("{flag} needs a value")))
            };
            match flag {
                "--passes" => passes = Some(value()?),
                "--pass-option" => spec.pass_options.push(value()?),
                "--no-verify" => spec.no_verify = true,
                "%s" | "-" => {}
                f if f.starts_with('-') => return Err(bad(format!("unknown flag `{f}`"))),
                _ => {}
            }
            k += 1;
        }
        spec.passes = passes.ok_or_else(|| bad("no --passes".into()))?;
        Ok(spec)
    }
}

/// The result of [`run_opt`].
#[derive(Clone, Debug)]
pub struct OptOutput {
    pub text: String,
    pub report: RunReport,
    pub module: Module,
}

/// Parses `input`, runs the pipeline `spec` names, and prints the result.
pub fn run_opt(
    input: &str,
    spec: &OptSpec,
    registry: &Registry,
    hooks: &Hooks,
) -> Result<OptOutput> {
    let mut pipeline = registry.build_pipeline(&spec.passes, &spec.pass_options)?;
    let mut module = (hooks.parse)(input).map_err(PassError::Parse)?;
    if let (Some(v), false) = (hooks.verify, spec.no_verify) {
        pipeline.add_checker("verifier", v);
    }
    if let Some(dir) = &spec.dump_dir {
        pipeline.dump_to(dir.clone(), hooks.print);
    }
    let report = pipeline.run_with_report(&mut module)?;
    let mut text = (hooks.print)(&module);
    for (pass, remark) in &report.remarks {
        text.truncate(text.trim_end().len());
        text.push_str(&format!("\n\n// {pass}:\n"));
        for line in remark.lines() {
            text.push_str(format!("// {line}").trim_end());
            text.push('\n');
        }
    }
    Ok(OptOutput {
        text,
        report,
        module,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_run_lines_like_the_command_line() {
        let s = OptSpec::from_run_line(
            "// RUN: tessera opt %s --passes dce,fix(tuple-simplify,dce) --pass-option dce.remove_dead_computations=false --pass-option=inline.single_call_site=true | FileCheck %s",
        )
        .unwrap();
        assert_eq!(s.passes, "dce,fix(tuple-simplify,dce)");
        assert_eq!(
            s.pass_options,
            [
                "dce.remove_dead_computations=false",
                "inline.single_call_site=true"
            ]
        );
        assert!(!s.no_verify);
        let s = OptSpec::from_run_line("// RUN: tessera opt --passes=dce --no-verify").unwrap();
        assert_eq!(s.passes, "dce");
        assert!(s.no_verify);
        for bad in [
            "// RUN: tessera fmt x",
            "// RUN: tessera opt --bogus",
            "// RUN: tessera opt",
            "// RUN: tessera opt --passes",
        ] {
            assert!(OptSpec::from_run_line(bad).is_err(), "{bad}");
        }
    }

    fn parse_stub(text: &str) -> std::result::Result<Module, String> {
        // "name" -> a module with that name and an empty entry
        let mut m = Module::new(text.trim());
        let c = m.add_computation("main").map_err(|e| e.to_string())?;
        m.set_entry(c);
        Ok(m)
    }

    fn print_stub(m: &Module) -> String {
        format!("{} {}\n", m.name, m.computations().len())
    }

    #[test]
    fn runs_parse_pipeline_print() {
        let r = Registry::with_generic_passes();
        let hooks = Hooks {
            parse: parse_stub,
            print: print_stub,
            verify: Some(|m| {
                if m.name == "bad" {
                    Err("bad module".into())
                } else {
                    Ok(())
                }
            }),
        };
        let spec = OptSpec {
            passes: "dce,flatten-call-graph".into(),
            ..OptSpec::default()
        };
        let out = run_opt("m", &spec, &r, &hooks).unwrap();
        assert_eq!(out.text, "m 1\n");
        assert_eq!(out.report.stages.len(), 2);
        let err = run_opt("bad", &spec, &r, &hooks).unwrap_err().to_string();
        assert_eq!(
            err,
            "invariant checker `verifier` failed on the input: bad module"
        );
        let spec = OptSpec {
            no_verify: true,
            ..spec
        };
        assert!(run_opt("bad", &spec, &r, &hooks).is_ok());
        // Analysis printers append their report as comments.
        let spec = OptSpec {
            passes: "print-call-graph".into(),
            ..OptSpec::default()
        };
        let out = run_opt("m", &spec, &r, &hooks).unwrap();
        assert_eq!(
            out.text,
            "m 1\n\n// print-call-graph:\n// main: context=control-flow depth=0 callers=[]\n// flattened: true\n"
        );
    }
}
