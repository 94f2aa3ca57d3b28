//! `tessera run` and `tessera compare`: running modules on the PJRT CPU plugin.
//!
//! * `tessera run FILE [--devices N] [--per-device] [--inputs DIR | --random --seed S]
//!   [--outputs DIR]` runs a module. With one device its shardings are ignored. With `N > 1`
//!   the module's shardings say how global inputs are split and outputs assembled, and XLA's own
//!   SPMD partitioner partitions it; with `--per-device` the module is taken as already
//!   partitioned (MANUAL on its parameters and root) and runs as is on every device.
//! * `tessera compare ORIGINAL PARTITIONED --devices N` runs the equivalence harness
//!   ([`tessera_runtime::harness`]) and prints, per output, the max absolute and relative
//!   errors; it reports `false` (exit status 1) when an output differs.
//!
//! Files: inputs are `DIR/arg<i>.npy` (parameter number `i`; `DIR/<parameter name>.npy` is
//! tried next), per-device inputs `DIR/arg<i>.dev<d>.npy`; outputs are `DIR/out<k>.npy` (the
//! flattened outputs, tuple leaves in order), per-device outputs `DIR/out<k>.dev<d>.npy`. The
//! `.npy` format and its element-type mapping (bf16 and fp8 as raw bits) are described in
//! [`tessera_runtime::npy`]. Modules are read as HLO text, or as a serialized
//! `xla.HloModuleProto` when the file ends in `.pb`.
//!
//! Resources (docs/dedup.md): parameters of one `tessera.resource` get one array (random
//! inputs are drawn once per resource; a later `arg<i>.npy` of a resource may be left out). A
//! deduplicated module (with a `tessera.argument_map`) takes the original's arguments, fed to
//! its parameters through the map, so `tessera compare IN OUT` compares a module with its
//! deduplicated form; `--partition-with-xla` runs a still-sharded OUT through the plugin's own
//! SPMD partitioner instead of as a per-device program (`--reference xla-spmd` is about the
//! other side: what OUT is compared with).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tessera_hlo::Module;
use tessera_runtime::harness::{
    self, CandidateMode, CompareOptions, Precision, Reference, Tolerance,
};
use tessera_runtime::Outcome;
use tessera_runtime::{npy, Client, HostArray, HostValue};

/// Parses module text; `Err` carries a `line:col: message` text.
pub type ParseFn = fn(&str) -> std::result::Result<Module, String>;

#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// The module: HLO text, or a serialized HloModuleProto (`.pb`).
    pub file: PathBuf,
    /// Number of devices (partitions).
    #[arg(long, default_value_t = 1)]
    pub devices: usize,
    /// The module is already partitioned: run it as is on every device.
    #[arg(long)]
    pub per_device: bool,
    /// Directory of `arg<i>.npy` inputs (or `arg<i>.dev<d>.npy` per device).
    #[arg(long, conflicts_with = "random")]
    pub inputs: Option<PathBuf>,
    /// Random inputs (the default when no --inputs is given).
    #[arg(long)]
    pub random: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Directory to write `out<k>.npy` into; without it a summary is printed.
    #[arg(long)]
    pub outputs: Option<PathBuf>,
}

#[derive(Clone, Debug, clap::Args)]
pub struct CompareArgs {
    /// The module before partitioning (shardings on its parameters and root).
    pub original: PathBuf,
    /// The per-device module.
    pub partitioned: PathBuf,
    #[arg(long)]
    pub devices: usize,
    /// Directory of global `arg<i>.npy` inputs; random inputs otherwise.
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How the verdict is decided (shared with `compile --verify`).
    #[command(flatten)]
    pub verdict: VerdictArgs,
    /// PARTITIONED still carries shardings (e.g. a deduplicated original): partition it with
    /// the PJRT plugin's own SPMD partitioner for --devices (on 1 device: run it as one global
    /// program) instead of as a per-device module. Without it this is detected from its
    /// shapes and shardings.
    #[arg(long)]
    pub partition_with_xla: bool,
}

/// How a comparison is decided: one set of flags for `tessera compare` and `tessera compile
/// --verify`, one implementation behind them ([`harness::verify`], docs/runtime.md).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct VerdictArgs {
    /// What the candidate is compared with: `auto` (the original on 1 device where it has a
    /// single-device meaning; XLA's own SPMD partitioning of it on the same devices where it
    /// holds a manual region or an explicit collective), `single-device` or `xla-spmd`.
    #[arg(long, value_enum, default_value_t = ReferenceArg::Auto)]
    pub reference: ReferenceArg,
    /// Decide at the programs' own precision, each element within its type's tolerance,
    /// without the f64 run (faster; a long reduction split over devices may fail it while
    /// right).
    #[arg(long)]
    pub native: bool,
    /// Decide at the programs' own precision with this relative tolerance for floats.
    #[arg(long, requires = "atol")]
    pub rtol: Option<f64>,
    /// With --rtol: the absolute tolerance.
    #[arg(long, requires = "rtol")]
    pub atol: Option<f64>,
    /// Deciding in f64 is the default; accepted for scripts written before.
    #[arg(long, hide = true, conflicts_with_all = ["native", "rtol"])]
    pub f64: bool,
}

impl VerdictArgs {
    /// The first flag given, by name (`compile` takes them only with `--verify`).
    pub fn given(&self) -> Option<&'static str> {
        if self.f64 {
            Some("--f64")
        } else if self.native {
            Some("--native")
        } else if self.rtol.is_some() {
            Some("--rtol")
        } else if self.reference != ReferenceArg::Auto {
            Some("--reference")
        } else {
            None
        }
    }

    pub fn options(&self) -> CompareOptions {
        CompareOptions {
            float_tolerance: self
                .rtol
                .zip(self.atol)
                .map(|(rel, abs)| Tolerance { rel, abs }),
            reference: match self.reference {
                ReferenceArg::Auto => Reference::Auto,
                ReferenceArg::SingleDevice => Reference::SingleDevice,
                ReferenceArg::XlaSpmd => Reference::XlaPartitioned,
            },
            precision: if self.native {
                Precision::Native
            } else {
                Precision::Wide
            },
            candidate: CandidateMode::Auto,
        }
    }
}

/// `--reference` of `tessera compare` and `tessera compile --verify`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReferenceArg {
    #[default]
    Auto,
    SingleDevice,
    XlaSpmd,
}

/// A verdict other than *equivalent*, as the error `main` turns into its exit status (1 for
/// NOT equivalent, 3 for not comparable).
#[derive(Debug)]
pub struct VerdictError(pub Outcome);

impl std::fmt::Display for VerdictError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Outcome::NotComparable => {
                "not comparable: see the reason above (exit status 3); no compared output differs"
            }
            _ => "the outputs differ from the reference's",
        })
    }
}

impl std::error::Error for VerdictError {}

/// The HLO text parser, as a [`ParseFn`].
pub fn parse_text(text: &str) -> std::result::Result<Module, String> {
    tessera_hlo::text::parse_module(text).map_err(|e| e.to_string())
}

/// Reads a module from HLO text (with `parse`) or from HloModuleProto bytes (`.pb`), and
/// verifies it: the plugin is never handed a module our verifier refuses.
pub fn load_module(path: &Path, parse: ParseFn) -> Result<Module> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let m = if path.extension().is_some_and(|e| e == "pb") {
        tessera_hlo::proto::from_proto_bytes(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
    } else {
        let text = crate::utf8_text(bytes, &path.display().to_string())?;
        let m = parse(&text).map_err(|e| anyhow::anyhow!("{}:{e}", path.display()))?;
        if let Some(line) = elided_constant_line(&text) {
            eprintln!(
                "note: {}:{line}: a constant written without its values (`{{...}}`, how XLA's \
                 dumps elide large constants) reads as zeros, so it runs as zeros; dump with \
                 --xla_dump_large_constants=true for the real values",
                path.display()
            );
        }
        m
    };
    crate::check_verifies(&m, &path.display().to_string())?;
    Ok(m)
}

/// The first line (1-based) holding a constant written `constant({...})`, also spaced out.
fn elided_constant_line(text: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            l.split("constant(").skip(1).any(|rest| {
                let rest = rest.trim_start();
                rest.strip_prefix('{')
                    .map(str::trim_start)
                    .and_then(|r| r.strip_prefix("..."))
                    .is_some_and(|r| r.trim_start().starts_with('}'))
            })
        })
        .map(|k| k + 1)
}

fn read_npy(path: &Path, expected: Option<tessera_hlo::ElementType>) -> Result<HostArray> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    npy::read(&bytes, expected).with_context(|| format!("{}", path.display()))
}

fn write_npy(path: &Path, a: &HostArray) -> Result<()> {
    std::fs::write(path, npy::write(a)).with_context(|| format!("cannot write {}", path.display()))
}

/// Global inputs from `dir`, checked against the entry parameter shapes, one value per entry
/// parameter. The files are the caller's arguments: `arg<k>.npy` (or the parameter's name) per
/// parameter, or, for a deduplicated module (`tessera.argument_map`), per argument of the
/// original parameter list, fed to the parameters through the map. Arguments of one resource
/// (`tessera.resource`) are one variable: a later argument of a resource without a file takes
/// the first one's array, and one with a different array is an error.
pub fn read_inputs(m: &Module, dir: &Path) -> Result<Vec<HostValue>> {
    use tessera_hlo::resource;
    let shapes = harness::entry_parameter_shapes(m)?;
    let entry = m.entry().context("the module has no entry computation")?;
    let map = resource::arguments_to_parameters(m)?;
    let resources = resource::entry_resources(m)?;
    let arg_resources: Vec<_> = map.iter().map(|&p| resources[p].clone()).collect();
    let first = resource::first_slot_of_resource(&arg_resources);
    let mut out: Vec<HostValue> = Vec::with_capacity(map.len());
    for (k, &p) in map.iter().enumerate() {
        let shape = &shapes[p];
        let a = shape
            .as_array()
            .with_context(|| format!("parameter {p} is not an array: not supported"))?;
        let mut path = dir.join(format!("arg{k}.npy"));
        if !path.exists() {
            if let Some(param) = m.comp(entry).parameter(p) {
                let named = dir.join(format!("{}.npy", m.instr(param).name()));
                if named.exists() && first[k] == k {
                    path = named;
                }
            }
        }
        let j = first[k];
        if j != k && !path.exists() {
            let shared = out[j].clone();
            out.push(shared);
            continue;
        }
        let v = read_npy(&path, Some(a.ty))?;
        if v.dims != a.dims.as_slice() {
            bail!(
                "{}: parameter {p} is {}, the file holds {}",
                path.display(),
                tessera_runtime::host::shape_string(shape),
                v.shape_string()
            );
        }
        let v = HostValue::Array(v);
        if j != k && v != out[j] {
            bail!(
                "{}: argument {k} is resource {}, as argument {j} is, but holds another array \
                 (one variable has one value)",
                path.display(),
                arg_resources[k]
                    .as_ref()
                    .expect("a shared slot has a resource")
            );
        }
        out.push(v);
    }
    Ok(harness::feed_through_map(m, &out)?)
}

/// Per-device inputs for an already partitioned module: `arg<i>.dev<d>.npy`, else `arg<i>.npy`
/// for every device.
fn read_per_device_inputs(m: &Module, dir: &Path, n: usize) -> Result<Vec<Vec<HostArray>>> {
    let shapes = harness::entry_parameter_shapes(m)?;
    let mut out = vec![Vec::new(); n];
    for (i, shape) in shapes.iter().enumerate() {
        let a = shape
            .as_array()
            .with_context(|| format!("parameter {i} is not an array: not supported"))?;
        for (d, list) in out.iter_mut().enumerate() {
            let own = dir.join(format!("arg{i}.dev{d}.npy"));
            let path = if own.exists() {
                own
            } else {
                dir.join(format!("arg{i}.npy"))
            };
            let v = read_npy(&path, Some(a.ty))?;
            if v.dims != a.dims.as_slice() {
                bail!(
                    "{}: parameter {i} is {} per device, the file holds {}",
                    path.display(),
                    tessera_runtime::host::shape_string(shape),
                    v.shape_string()
                );
            }
            list.push(v);
        }
    }
    Ok(out)
}

fn summary(a: &HostArray) -> String {
    let n = a.element_count();
    let shown: Vec<String> = (0..n.min(8)).map(|k| a.get(k).to_string()).collect();
    format!(
        "{} [{}{}]",
        a.shape_string(),
        shown.join(", "),
        if n > 8 { ", ..." } else { "" }
    )
}

/// The most CPU devices `run` and `compare` create (the plugin was checked with up to 16;
/// creating 100,000 hangs).
pub const MAX_DEVICES: usize = 256;

/// Checks, before any PJRT client exists, that `m` can run on `devices` devices: the count is
/// one the plugin can create, every sharding fits that many devices when they are used
/// (`sharded`), and the entry takes and returns only arrays. Errors name the instruction.
pub fn check_runnable(m: &Module, devices: usize, sharded: bool, shown: &str) -> Result<()> {
    if devices == 0 || devices > MAX_DEVICES {
        bail!("--devices {devices}: the CPU plugin runs 1 to {MAX_DEVICES} devices");
    }
    if sharded {
        let options = tessera_hlo::verify::VerifyOptions {
            num_devices: Some(devices as i64),
            ..Default::default()
        };
        if let Err(errors) = tessera_hlo::verify::verify(m, &options) {
            bail!("{shown}: the module does not fit --devices {devices}\n{errors}");
        }
    }
    if let Some(what) = harness::host_transfer(m) {
        bail!(
            "{shown}: {what} transfers to or from the host, which `run` and `compare` do not \
             serve (the execution would wait for it forever)"
        );
    }
    let entry = m.entry().context("the module has no entry computation")?;
    let comp = m.comp(entry);
    let not_array = |s: &tessera_hlo::Shape| {
        let mut bad = None;
        s.for_each_subshape(|_, sub| {
            if bad.is_none() && !sub.is_tuple() && sub.as_array().is_none() {
                bad = Some(tessera_runtime::host::shape_string(sub));
            }
        });
        bad
    };
    for p in comp.parameters() {
        let i = m.instr(p);
        if let Some(what) = not_array(&i.shape) {
            bail!(
                "{shown}: entry parameter %{} holds a {what}: `run` passes only arrays",
                i.name()
            );
        }
    }
    if let Some(r) = comp.root() {
        let i = m.instr(r);
        if let Some(what) = not_array(&i.shape) {
            bail!(
                "{shown}: the entry root %{} holds a {what}: `run` returns only arrays",
                i.name()
            );
        }
    }
    Ok(())
}

/// `tessera run`: returns the text to print.
pub fn run(args: &RunArgs, parse: ParseFn) -> Result<String> {
    let m = load_module(&args.file, parse)?;
    let shown = args.file.display().to_string();
    check_runnable(
        &m,
        args.devices,
        args.devices > 1 && !args.per_device,
        &shown,
    )?;
    harness::check_host_memory(&m, args.devices, false).with_context(|| shown.clone())?;
    let client = Client::cpu(args.devices.max(1))?;
    let mut text = String::new();
    // Per device outputs (per-device mode) or global outputs.
    let outputs: Vec<(String, HostArray)> = if args.per_device {
        let inputs = match &args.inputs {
            Some(dir) => read_per_device_inputs(&m, dir, args.devices)?,
            None => (0..args.devices)
                .map(|d| {
                    harness::random_inputs(&m, args.seed ^ (d as u64).wrapping_mul(0x9e37)).map(
                        |v| {
                            v.into_iter()
                                .filter_map(|x| x.as_array().cloned())
                                .collect()
                        },
                    )
                })
                .collect::<Result<_, _>>()?,
        };
        let prepared = harness::prepare_partitioned(&m, args.devices)?;
        let outs = harness::run_module(
            &client,
            &prepared,
            &harness::per_device_options(args.devices),
            &inputs,
        )?;
        outs.into_iter()
            .enumerate()
            .flat_map(|(d, list)| {
                list.into_iter()
                    .enumerate()
                    .map(move |(k, a)| (format!("out{k}.dev{d}"), a))
            })
            .collect()
    } else {
        let inputs = match &args.inputs {
            Some(dir) => read_inputs(&m, dir)?,
            None => harness::random_inputs(&m, args.seed)?,
        };
        if args.devices == 1 {
            let n = harness::sharding_device_count(&m);
            if n > 1 && harness::manual_region(&m).is_none() {
                eprintln!(
                    "note: {} carries shardings for {n} devices; on 1 device it runs as one \
                     global program (the shardings only annotate it)",
                    args.file.display()
                );
            }
            harness::run_original(&client, &m, &inputs)?
                .into_iter()
                .enumerate()
                .map(|(k, a)| (format!("out{k}"), a))
                .collect()
        } else {
            let mut outs = Vec::new();
            for (k, a) in harness::run_xla_partitioned(&client, &m, args.devices, &inputs)?
                .into_iter()
                .enumerate()
            {
                for mm in &a.mismatches {
                    text.push_str(&format!("warning: out{k}: replicas disagree: {mm}\n"));
                }
                let arr = a
                    .value
                    .as_array()
                    .cloned()
                    .context("a nested tuple output is not supported")?;
                outs.push((format!("out{k}"), arr));
            }
            outs
        }
    };
    if let Some(dir) = &args.outputs {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (name, a) in &outputs {
            let path = dir.join(format!("{name}.npy"));
            write_npy(&path, a)?;
            text.push_str(&format!(
                "{name}: {} -> {}\n",
                a.shape_string(),
                path.display()
            ));
        }
    } else {
        for (name, a) in &outputs {
            text.push_str(&format!("{name}: {}\n", summary(a)));
        }
    }
    Ok(text)
}

/// `tessera compare`: the report text and whether every output matched.
pub fn compare(args: &CompareArgs, parse: ParseFn) -> Result<(String, Outcome)> {
    let (original, partitioned) = (
        load_module(&args.original, parse)?,
        load_module(&args.partitioned, parse)?,
    );
    // Shardy's shape custom-calls run only inside jax's pipeline: read as compile reads them.
    let original = tessera_compile::runnable_form(&original)
        .with_context(|| args.original.display().to_string())?;
    let partitioned = tessera_compile::runnable_form(&partitioned)
        .with_context(|| args.partitioned.display().to_string())?;
    // On one device the original runs as one global program, its shardings ignored.
    check_runnable(
        &original,
        args.devices,
        args.devices > 1,
        &args.original.display().to_string(),
    )?;
    check_runnable(
        &partitioned,
        args.devices,
        false,
        &args.partitioned.display().to_string(),
    )?;
    harness::check_host_memory(&original, args.devices, !args.verdict.native)
        .with_context(|| format!("{}", args.original.display()))?;
    let inputs = match &args.inputs {
        Some(dir) => read_inputs(&original, dir)?,
        None => harness::random_inputs(&original, args.seed)?,
    };
    let client = Client::cpu(args.devices)?;
    let mut options = args.verdict.options();
    if args.partition_with_xla {
        options.candidate = CandidateMode::XlaPartitioned;
    }
    let report = harness::check_equivalence(
        &client,
        &original,
        &partitioned,
        args.devices,
        &inputs,
        options,
    )?;
    Ok((format!("{report}\n"), report.outcome()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elided_constants_are_found_by_line() {
        let dump = "HloModule m\n\nENTRY e {\n  c = f32[2] constant({1, 2})\n  \
                    %constant.0 = f32[4,3]{1,0} constant({ ... }), metadata={}\n}\n";
        assert_eq!(elided_constant_line(dump), Some(5));
        assert_eq!(
            elided_constant_line("  c = f32[4] constant({...})"),
            Some(1)
        );
        assert_eq!(elided_constant_line("  c = f32[2] constant({1, 2})"), None);
        assert_eq!(
            elided_constant_line("  c = s32[] constant(3), op_name=\"{...}\""),
            None
        );
    }

    fn no_text(_: &str) -> std::result::Result<Module, String> {
        Err("1:1: text not supported in this test".into())
    }

    /// `x + x` for x: f32[4], written as a proto file.
    fn double_module(dir: &Path) -> PathBuf {
        use tessera_hlo::{ElementType, Instruction, Opcode, Shape};
        let mut m = Module::new("double");
        let e = m.add_computation("main").unwrap();
        m.set_entry(e);
        let mut p = Instruction::new("x", Opcode::Parameter, Shape::array(ElementType::F32, &[4]));
        p.attrs.parameter_number = 0;
        let x = m.add_instruction(e, p).unwrap();
        let y = m
            .add_instruction(
                e,
                Instruction::new("y", Opcode::Add, Shape::array(ElementType::F32, &[4]))
                    .with_operands(&[x, x]),
            )
            .unwrap();
        m.set_root(e, y);
        let path = dir.join("double.pb");
        std::fs::write(&path, tessera_hlo::proto::to_proto_bytes(&m)).unwrap();
        path
    }

    #[test]
    fn run_and_compare_on_the_plugin() {
        let dir = std::env::temp_dir().join(format!("tessera-run-e2e-{}", std::process::id()));
        let ins = dir.join("in");
        std::fs::create_dir_all(&ins).unwrap();
        let file = double_module(&dir);
        let a = HostArray::f32(&[4], &[1.0, -2.0, 0.5, 3.0]).unwrap();
        std::fs::write(ins.join("arg0.npy"), npy::write(&a)).unwrap();
        let out = dir.join("out");
        let args = RunArgs {
            file: file.clone(),
            devices: 1,
            per_device: false,
            inputs: Some(ins.clone()),
            random: false,
            seed: 0,
            outputs: Some(out.clone()),
        };
        let text = run(&args, no_text).unwrap();
        assert!(text.starts_with("out0: f32[4] -> "), "{text}");
        let got = npy::read(&std::fs::read(out.join("out0.npy")).unwrap(), None).unwrap();
        assert_eq!(got.to_f32().unwrap(), vec![2.0, -4.0, 1.0, 6.0]);
        // Per device on 2 devices, printed.
        let text = run(
            &RunArgs {
                devices: 2,
                per_device: true,
                outputs: None,
                ..args
            },
            no_text,
        )
        .unwrap();
        assert_eq!(
            text,
            "out0.dev0: f32[4] [2.0, -4.0, 1.0, 6.0]\nout0.dev1: f32[4] [2.0, -4.0, 1.0, 6.0]\n"
        );
        // A replicated module is its own partitioned form.
        let (report, ok) = compare(
            &CompareArgs {
                original: file.clone(),
                partitioned: file,
                devices: 2,
                inputs: None,
                seed: 3,
                verdict: VerdictArgs::default(),
                partition_with_xla: false,
            },
            no_text,
        )
        .unwrap();
        assert_eq!(ok, Outcome::Equivalent, "{report}");
        assert!(
            report.contains("output 0 f32[4]: ok in f64: max abs error 0.000e0"),
            "{report}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn compare_reads_xla_text_pairs() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/spmd_pairs/");
        let args = CompareArgs {
            original: PathBuf::from(format!("{dir}reduce_sum_sharded.before.hlo")),
            partitioned: PathBuf::from(format!("{dir}reduce_sum_sharded.after.hlo")),
            devices: 4,
            inputs: None,
            seed: 5,
            verdict: VerdictArgs::default(),
            partition_with_xla: false,
        };
        let (report, ok) = compare(&args, parse_text).unwrap();
        assert_eq!(ok, Outcome::Equivalent, "{report}");
        assert!(report.contains("\noutput 0 f32[8]: ok"), "{report}");
        // Swapped, the per-device module's f32[4,8] parameter cannot take f32[16,8] pieces.
        let swapped = CompareArgs {
            original: args.partitioned.clone(),
            partitioned: args.original.clone(),
            ..args
        };
        assert!(compare(&swapped, parse_text).is_err());
    }

    /// `tessera compare` with no flags says equal on every before/after-spmd-partitioning pair
    /// of XLA's dumps (testdata/dumps, both jax modes), the shard_map ones included: their
    /// reference is XLA's partitioning, chosen automatically. Asked for a single-device
    /// reference, the shard_map original is refused with the reason.
    #[test]
    fn compare_answers_on_every_xla_dump_pair() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/dumps/");
        let pair = |name: &str, reference| CompareArgs {
            original: PathBuf::from(format!("{dir}{name}.before-spmd.txt")),
            partitioned: PathBuf::from(format!("{dir}{name}.after-spmd.txt")),
            devices: 8,
            inputs: None,
            seed: 1,
            verdict: VerdictArgs {
                reference,
                ..VerdictArgs::default()
            },
            partition_with_xla: false,
        };
        let models = [
            "mlp",
            "transformer_block",
            "convnet",
            "embedding",
            "scan_loop",
            "topk",
            "cond",
            "shard_map",
        ];
        for mode in ["gspmd", "shardy"] {
            for model in models {
                let name = format!("{model}.{mode}");
                let (report, ok) = compare(&pair(&name, ReferenceArg::Auto), parse_text)
                    .unwrap_or_else(|e| panic!("{name}: {e:#}"));
                assert_eq!(ok, Outcome::Equivalent, "{name}: {report}");
                if model == "shard_map" {
                    assert!(
                        report.contains("reference: XLA's own SPMD partitioning")
                            && report.contains("manual"),
                        "{name}: {report}"
                    );
                }
            }
            let name = format!("shard_map.{mode}");
            let e = compare(&pair(&name, ReferenceArg::SingleDevice), parse_text)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("a manual region (shard_map) is written per device")
                    && e.contains("--reference xla-spmd"),
                "{name}: {e}"
            );
        }
    }

    /// `tessera run` on 1 device runs a module sharded for 8 as one program, and refuses what
    /// has no meaning there with the reason, never a plugin RET_CHECK.
    #[test]
    fn run_takes_dumps_as_users_have_them() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/dumps/");
        let args = |file: &str, devices| RunArgs {
            file: PathBuf::from(format!("{dir}{file}")),
            devices,
            per_device: false,
            inputs: None,
            random: true,
            seed: 0,
            outputs: None,
        };
        let text = run(
            &args("scan_loop.shardy.before-propagation.txt", 1),
            parse_text,
        )
        .unwrap();
        assert!(text.starts_with("out0: f32[8,32] ["), "{text}");
        let e = run(&args("shard_map.gspmd.before-spmd.txt", 1), parse_text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("%shard_map.8 is a custom-call to SPMDFullToShardShape")
                && e.contains("run it on its 8 devices"),
            "{e}"
        );
        let e = run(
            &args("shard_map.shardy.before-propagation.txt", 8),
            parse_text,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("custom-call to xla.sdy.GlobalToLocalShape, one of Shardy's own"),
            "{e}"
        );
    }

    #[test]
    fn inputs_are_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("tessera-run-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A module with one f32[2] parameter, by proto.
        let mut m = Module::new("m");
        let e = m.add_computation("main").unwrap();
        m.set_entry(e);
        let mut p = tessera_hlo::Instruction::new(
            "x",
            tessera_hlo::Opcode::Parameter,
            tessera_hlo::Shape::array(tessera_hlo::ElementType::F32, &[2]),
        );
        p.attrs.parameter_number = 0;
        m.add_instruction(e, p).unwrap();
        let a = HostArray::f32(&[2], &[1.0, 2.0]).unwrap();
        std::fs::write(dir.join("x.npy"), npy::write(&a)).unwrap();
        let got = read_inputs(&m, &dir).unwrap();
        assert_eq!(got, vec![HostValue::Array(a)]);
        // Wrong shape: named in the error.
        let b = HostArray::f32(&[3], &[1.0, 2.0, 3.0]).unwrap();
        std::fs::write(dir.join("arg0.npy"), npy::write(&b)).unwrap();
        let e = read_inputs(&m, &dir).unwrap_err().to_string();
        assert!(
            e.contains("parameter 0 is f32[2], the file holds f32[3]"),
            "{e}"
        );
        // Proto files load without a text parser; text goes to the parser.
        let pb = dir.join("m.pb");
        std::fs::write(&pb, tessera_hlo::proto::to_proto_bytes(&m)).unwrap();
        assert_eq!(load_module(&pb, no_text).unwrap().name, "m");
        let txt = dir.join("m.hlo");
        std::fs::write(&txt, "HloModule m").unwrap();
        let e = load_module(&txt, no_text).unwrap_err().to_string();
        assert!(
            e.ends_with("m.hlo:1:1: text not supported in this test"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
