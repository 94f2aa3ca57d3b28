//! `tessera memory FILE`: the peak memory of a module along its schedule, where it occurs, the
//! largest buffers live there; optionally the memory after a pipeline (`--passes`) and an SVG
//! of memory over the schedule (`--svg`), before and after overlaid.

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use tessera_hlo::analysis::shape_size;
use tessera_hlo::Module;
use tessera_pass::options::parse_int;
use tessera_pass::stats::short_shape;
use tessera_remat::schedule_memory::{module_memory, MemoryOptions, ModuleMemory};
use tessera_remat::schedule_svg::{human, render_svg, Series};
use tessera_remat::{schedule_module, SchedulerKind};

#[derive(Args, Debug)]
pub struct MemoryArgs {
    /// HLO text file to read (`-` for stdin).
    pub file: String,
    /// Schedule with this scheduler (post-order, dfs, list, default). Without it a scheduled
    /// module keeps its schedule and an unscheduled one gets the default scheduler.
    #[arg(long)]
    pub scheduler: Option<String>,
    /// How many of the largest buffers live at the peak to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Passes to run after scheduling (as `opt --passes`); the memory after them is reported
    /// too and overlaid in the SVG.
    #[arg(long)]
    pub passes: Option<String>,
    /// A pass option, `PASS.KEY=VALUE` (repeatable). A `*.memory_limit` is drawn in the SVG.
    #[arg(long = "pass-option", value_name = "PASS.KEY=VALUE")]
    pub pass_options: Vec<String>,
    /// Write an SVG of memory over the entry computation's schedule positions.
    #[arg(long, value_name = "OUT")]
    pub svg: Option<PathBuf>,
}

fn measure(module: &Module) -> Result<ModuleMemory> {
    Ok(module_memory(
        module,
        None,
        &shape_size,
        MemoryOptions::default(),
    )?)
}

/// The report of one measurement: the peak, where, what is live there, per computation.
fn report(out: &mut String, module: &Module, mem: &ModuleMemory, top: usize) {
    let entry = mem.entry_memory();
    let _ = writeln!(
        out,
        "peak: {} bytes ({}) = entry computation {} + output {}; parameters {} bytes not counted",
        mem.peak_bytes,
        human(mem.peak_bytes),
        mem.peak_bytes - mem.output_bytes,
        mem.output_bytes,
        mem.parameter_bytes
    );
    let ename = &module.comp(mem.entry).name();
    match entry.peak_position {
        Some(p) => {
            let at = entry.sequence[p];
            let _ = write!(
                out,
                "at: {ename} position {p} of {} (%{})",
                entry.sequence.len(),
                module.instr(at).name()
            );
            if entry.callee_bytes[p] > 0 {
                let called: Vec<String> = module
                    .instr(at)
                    .called
                    .iter()
                    .map(|&c| format!("{} {}", module.comp(c).name(), mem.computation_peak(c)))
                    .collect();
                let _ = write!(
                    out,
                    ", including {} bytes of called computations ({})",
                    entry.callee_bytes[p],
                    called.join(", ")
                );
            }
            let _ = writeln!(out);
        }
        None => {
            let _ = writeln!(out, "at: {ename} is empty");
        }
    }
    let live = entry.live_at_peak();
    let _ = writeln!(
        out,
        "live at the peak: {} buffers{}",
        live.len(),
        if live.len() > top {
            format!(", the {top} largest:")
        } else {
            ":".into()
        }
    );
    let rows: Vec<(String, String, i64)> = live
        .iter()
        .take(top)
        .map(|b| {
            let mut name = format!("%{}", module.instr(b.defining).name());
            if !b.index.is_empty() {
                let idx: Vec<String> = b.index.iter().map(|i| i.to_string()).collect();
                name.push_str(&format!("{{{}}}", idx.join(",")));
            }
            (name, short_shape(&b.shape), b.allocated)
        })
        .collect();
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(5);
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "  {:<w0$}  {:<w1$}  {:>12}",
            "buffer", "shape", "bytes"
        );
    }
    for (name, shape, bytes) in &rows {
        let _ = writeln!(out, "  {name:<w0$}  {shape:<w1$}  {bytes:>12}");
    }
    if mem.computations.len() > 1 {
        let _ = writeln!(out, "computations (peak, where):");
        for cm in &mem.computations {
            let at = cm
                .peak_instruction()
                .map(|i| format!("%{}", module.instr(i).name()))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "  {}: {} bytes at {at}",
                module.comp(cm.comp).name(),
                cm.peak_bytes
            );
        }
    }
    if !mem.unscheduled.is_empty() {
        let names: Vec<&str> = mem
            .unscheduled
            .iter()
            .map(|&c| module.comp(c).name())
            .collect();
        let _ = writeln!(
            out,
            "note: no sequence for {}; measured along post-order",
            names.join(", ")
        );
    }
}

/// `tessera memory FILE [--scheduler S] [--top N] [--passes P --pass-option K=V...] [--svg OUT]`.
pub fn memory(args: &MemoryArgs) -> Result<String> {
    crate::opt::init_tracing(0);
    // A pass option configures a pass of --passes; without them nothing would read it.
    if args.passes.is_none() {
        if let Some(o) = args.pass_options.first() {
            anyhow::bail!(
                "--pass-option {o}: options configure the passes of --passes, and none are \
                 given (e.g. --passes schedule,remat --pass-option remat.memory_limit=8MB)"
            );
        }
    }
    let mut module = crate::load_text(&args.file)?;
    let mut out = String::new();
    let kind = match &args.scheduler {
        Some(s) => Some(s.parse::<SchedulerKind>()?),
        None if module.schedule.is_none() => Some(SchedulerKind::Default),
        None => None,
    };
    match kind {
        Some(k) => {
            let r = schedule_module(&mut module, k, &shape_size)
                .with_context(|| format!("{}: scheduling", args.file))?;
            let chosen: Vec<String> = r
                .computations
                .iter()
                .map(|c| format!("{} {}", c.name, c.chosen))
                .collect();
            let _ = writeln!(
                out,
                "module {}: scheduled by the {k} scheduler ({})",
                module.name,
                chosen.join(", ")
            );
        }
        None => {
            let _ = writeln!(out, "module {}: the schedule of the input", module.name);
        }
    }
    let before = measure(&module).with_context(|| args.file.clone())?;
    report(&mut out, &module, &before, args.top);
    let mut after = None;
    if let Some(passes) = &args.passes {
        let mut pipeline = crate::opt::registry().build_pipeline(passes, &args.pass_options)?;
        pipeline.add_checker("verifier", |m| {
            tessera_hlo::verify::verify(m, &tessera_hlo::verify::VerifyOptions::default())
                .map_err(|e| e.to_string())
        });
        pipeline
            .run_with_report(&mut module)
            .with_context(|| format!("{}: running {passes}", args.file))?;
        let mem = measure(&module).with_context(|| format!("{} after {passes}", args.file))?;
        let _ = writeln!(out, "\nafter {passes}:");
        report(&mut out, &module, &mem, args.top);
        let _ = writeln!(
            out,
            "change: {:+} bytes ({} -> {})",
            mem.peak_bytes - before.peak_bytes,
            human(before.peak_bytes),
            human(mem.peak_bytes)
        );
        after = Some(mem);
    }
    if let Some(path) = &args.svg {
        // Whole-module bytes at each entry position: the entry's profile plus the output.
        let curve = |m: &ModuleMemory| -> Vec<i64> {
            m.entry_memory()
                .bytes
                .iter()
                .map(|b| b + m.output_bytes)
                .collect()
        };
        let b = curve(&before);
        let a = after.as_ref().map(curve);
        let after_label = format!("after {}", args.passes.as_deref().unwrap_or(""));
        let mut series = vec![Series {
            label: "before",
            bytes: &b,
        }];
        if let Some(a) = &a {
            series.push(Series {
                label: &after_label,
                bytes: a,
            });
        } else {
            series[0].label = "memory";
        }
        let limit = args.pass_options.iter().find_map(|o| {
            let (k, v) = o.split_once('=')?;
            k.ends_with(".memory_limit").then(|| parse_int(v).ok())?
        });
        let title = format!(
            "{}: bytes live per position of {} (+ output)",
            module.name,
            module.comp(before.entry).name()
        );
        std::fs::write(path, render_svg(&title, &series, limit))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(out)
}
