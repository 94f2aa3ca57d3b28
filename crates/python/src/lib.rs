//! `tessera._tessera`: the Rust half of the `tessera` Python package.
//!
//! Thin bindings over the libraries: [`tessera_hlo`] (parse, print, proto), [`tessera_compile`]
//! (the pipeline and its report) and [`tessera_runtime`] (run and compare on PJRT devices). The
//! Python half (`python/tessera/__init__.py`) converts numpy arrays to and from the
//! `(type name, dims, bytes)` triples these functions take, and `tessera.jax` builds on both.
//!
//! Every error is a `tessera.TesseraError` whose message names the place (the input's
//! `line:col`, or the instruction) and whose `place` attribute holds it where there is one.
//! Parsing, compiling, running and comparing release the GIL.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use tessera_compile::{CompileOptions, CompileReport, Compiled};
use tessera_hlo::text::{parse_module, print_module, sharding_to_string, PrintOptions};
use tessera_hlo::{ElementType, Module as HloModule, ShardingKind};
use tessera_runtime::harness::{self, CompareOptions, Precision, Reference, Tolerance};
use tessera_runtime::{Client, HostArray, HostValue};

create_exception!(
    tessera,
    TesseraError,
    PyException,
    "An error of Tessera: the message names the place (`line:col` of the input, or the \
     instruction); `place` holds it where there is one, else None."
);

/// A `TesseraError` with `place` set.
fn error(py: Python<'_>, message: impl Into<String>, place: Option<String>) -> PyErr {
    let e = TesseraError::new_err(message.into());
    // Setting an attribute on a fresh exception object cannot fail in practice; if it did, the
    // message still names the place.
    let _ = e.value(py).setattr("place", place);
    e
}

/// An error whose place is the instruction or setting its message names.
/// `m` as the plugin runs it ([`tessera_compile::runnable_form`]).
fn runnable(m: HloModule) -> PyResult<HloModule> {
    Ok(match tessera_compile::runnable_form(&m).map_err(err)? {
        std::borrow::Cow::Borrowed(_) => m,
        std::borrow::Cow::Owned(imported) => imported,
    })
}

fn err(message: impl std::fmt::Display) -> PyErr {
    Python::attach(|py| {
        let m = message.to_string();
        let place = instruction_place(&m);
        error(py, m, place)
    })
}

/// The first `%name` in a message: the instruction it is about.
fn instruction_place(message: &str) -> Option<String> {
    let start = message.find('%')?;
    let name: String = message[start + 1..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .collect();
    (!name.is_empty()).then(|| format!("%{name}"))
}

/// A parsed HLO module.
#[pyclass(module = "tessera", name = "Module", frozen)]
#[derive(Clone)]
struct Module {
    inner: HloModule,
}

fn parse_text(text: &str) -> PyResult<HloModule> {
    parse_module(text).map_err(|e| {
        Python::attach(|py| {
            error(
                py,
                format!("{}:{}: {}", e.line, e.column, e.message),
                Some(format!("{}:{}", e.line, e.column)),
            )
        })
    })
}

fn parse_proto(bytes: &[u8]) -> PyResult<HloModule> {
    tessera_hlo::proto::from_proto_bytes(bytes)
        .map_err(|e| err(format!("not a valid xla.HloModuleProto: {e}")))
}

fn print(m: &HloModule, short: bool) -> String {
    let o = if short {
        PrintOptions::short()
    } else {
        PrintOptions::default()
    };
    print_module(m, &o)
}

#[pymethods]
impl Module {
    /// Parses HLO text (jax's `lower().as_text(dialect="hlo")`, XLA's dump files with `%x#N`,
    /// TensorFlow's HLO). Raises TesseraError at the `line:col` of the first error.
    #[staticmethod]
    fn parse(py: Python<'_>, text: &str) -> PyResult<Module> {
        let text = text.to_owned();
        let inner = py.detach(move || parse_text(&text))?;
        Ok(Module { inner })
    }

    /// Reads a serialized `xla.HloModuleProto`.
    #[staticmethod]
    fn from_proto(py: Python<'_>, data: &[u8]) -> PyResult<Module> {
        let data = data.to_vec();
        let inner = py.detach(move || parse_proto(&data))?;
        Ok(Module { inner })
    }

    /// The module as canonical HLO text (`short=True`: no `%`, operands without shapes).
    #[pyo3(signature = (short = false))]
    fn to_text(&self, py: Python<'_>, short: bool) -> String {
        py.detach(|| print(&self.inner, short))
    }

    /// The module as a serialized `xla.HloModuleProto`.
    fn to_proto<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| tessera_hlo::proto::to_proto_bytes(&self.inner));
        PyBytes::new(py, &bytes)
    }

    /// Runs the verifier; raises TesseraError listing every finding.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            tessera_hlo::verify::verify(&self.inner, &tessera_hlo::verify::VerifyOptions::default())
                .map_err(|e| err(format!("invalid module:\n{e}")))
        })
    }

    /// The module's name (its `HloModule` header).
    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    /// `num_partitions` of the module's header.
    #[getter]
    fn num_partitions(&self) -> i64 {
        self.inner.config.num_partitions
    }

    /// Instructions in all computations.
    #[getter]
    fn instruction_count(&self) -> usize {
        self.inner.instruction_count()
    }

    /// The devices the module's shardings are written for (1 without shardings).
    #[getter]
    fn sharding_device_count(&self) -> i64 {
        harness::sharding_device_count(&self.inner)
    }

    /// The entry parameters' shardings as XLA's text (`{devices=[2,1]<=[2]}`), None where a
    /// parameter has none.
    fn parameter_shardings(&self) -> PyResult<Vec<Option<String>>> {
        let m = &self.inner;
        let e = m
            .entry()
            .ok_or_else(|| err("the module has no entry computation"))?;
        Ok(m.comp(e)
            .parameters()
            .map(|p| m.instr(p).sharding.as_ref().map(sharding_to_string))
            .collect())
    }

    /// The entry root's sharding per output (a tuple root: one per element; else one), as
    /// XLA's text; None where there is none.
    fn output_shardings(&self) -> PyResult<Vec<Option<String>>> {
        let m = &self.inner;
        let e = m
            .entry()
            .ok_or_else(|| err("the module has no entry computation"))?;
        let root = m
            .comp(e)
            .root()
            .ok_or_else(|| err("the entry computation has no root"))?;
        let i = m.instr(root);
        let n = match &i.shape {
            tessera_hlo::Shape::Tuple(e) => Some(e.len()),
            _ => None,
        };
        Ok(match (n, &i.sharding) {
            (None, s) => vec![s.as_ref().map(sharding_to_string)],
            (Some(n), None) => vec![None; n],
            (Some(n), Some(s)) => match &s.kind {
                ShardingKind::Tuple(elements) => {
                    let mut v: Vec<Option<String>> = elements
                        .iter()
                        .map(|e| Some(sharding_to_string(e)))
                        .collect();
                    v.resize(n, None);
                    v
                }
                _ => vec![Some(sharding_to_string(s)); n],
            },
        })
    }

    fn __str__(&self, py: Python<'_>) -> String {
        self.to_text(py, false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<tessera.Module {} ({} instructions)>",
            self.inner.name,
            self.inner.instruction_count()
        )
    }
}

/// A Module, HLO text (str) or a serialized HloModuleProto (bytes).
fn module_arg(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<HloModule> {
    if let Ok(m) = value.cast::<Module>() {
        return Ok(m.get().inner.clone());
    }
    if let Ok(text) = value.extract::<String>() {
        return py.detach(move || parse_text(&text));
    }
    if let Ok(bytes) = value.extract::<Vec<u8>>() {
        return py.detach(move || {
            tessera_compile::parse_input(&bytes, "<bytes>").map_err(|e| err(e.to_string()))
        });
    }
    Err(err(format!(
        "expected a tessera.Module, HLO text (str) or an HloModuleProto (bytes), got {}",
        value.get_type().name()?
    )))
}

/// `pass_options`: a dict `{"PASS.KEY": value}` or a list of `"PASS.KEY=VALUE"` strings.
fn pass_options_arg(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(v) = value else {
        return Ok(Vec::new());
    };
    if v.is_none() {
        return Ok(Vec::new());
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut out = Vec::new();
        for (k, val) in d.iter() {
            let k: String = k.extract()?;
            let val = if let Ok(b) = val.extract::<bool>() {
                b.to_string()
            } else {
                val.str()?.to_string()
            };
            out.push(format!("{k}={val}"));
        }
        return Ok(out);
    }
    v.extract::<Vec<String>>().map_err(|_| {
        err("pass_options: expected a dict {\"PASS.KEY\": value} or a list of \"PASS.KEY=VALUE\"")
    })
}

/// The result of `tessera.compile`.
#[pyclass(module = "tessera", name = "CompileResult", frozen)]
struct CompileResult {
    compiled: Compiled,
}

fn report_dict<'py>(py: Python<'py>, r: &CompileReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("module", &r.module)?;
    d.set_item("num_partitions", r.num_partitions)?;
    d.set_item("total_ms", r.total.as_secs_f64() * 1e3)?;
    let passes = PyList::empty(py);
    for s in &r.stages {
        let p = PyDict::new(py);
        p.set_item("name", &s.name)?;
        p.set_item("ms", s.time.as_secs_f64() * 1e3)?;
        p.set_item("changed", s.changed)?;
        passes.append(p)?;
    }
    d.set_item("passes", passes)?;
    let peak = PyDict::new(py);
    peak.set_item("before", r.peak.unpartitioned)?;
    peak.set_item("partitioned", r.peak.partitioned)?;
    peak.set_item("after", r.peak.after_remat)?;
    peak.set_item("parameters", r.peak.parameters)?;
    peak.set_item("limit", r.peak.limit)?;
    peak.set_item("floor", r.peak.floor)?;
    peak.set_item("floor_any_schedule", r.peak.floor_any_schedule)?;
    d.set_item("peak_memory", peak)?;
    let totals = PyDict::new(py);
    for (k, c) in &r.collectives {
        let t = PyDict::new(py);
        t.set_item("count", c.count)?;
        t.set_item("bytes", c.bytes)?;
        totals.set_item(k, t)?;
    }
    d.set_item("collective_totals", totals)?;
    let notes = PyList::empty(py);
    for n in &r.spmd.collectives {
        let c = PyDict::new(py);
        c.set_item("collective", n.collective)?;
        c.set_item("instruction", &n.original)?;
        c.set_item("bytes", n.bytes)?;
        c.set_item("reason", &n.reason)?;
        notes.append(c)?;
    }
    d.set_item("collectives", notes)?;
    d.set_item("warnings", r.warnings.clone())?;
    d.set_item("undecided", r.undecided.clone())?;
    d.set_item("text", r.render())?;
    Ok(d)
}

#[pymethods]
impl CompileResult {
    /// The program every device runs.
    #[getter]
    fn module(&self) -> Module {
        Module {
            inner: self.compiled.module.clone(),
        }
    }

    /// The input after sharding propagation (before partitioning): every instruction with the
    /// sharding it was partitioned to.
    #[getter]
    fn sharded(&self) -> Module {
        Module {
            inner: self.compiled.sharded.clone(),
        }
    }

    /// What each pass did: `passes` (name, ms, changed), `peak_memory` per device (`before`
    /// partitioning, `partitioned`, `after` rematerialization, `parameters`, `limit`, floors),
    /// `collectives` (each with its `collective`, `instruction`, `bytes` received per device and
    /// `reason`), `collective_totals` by opcode, `warnings`, `undecided`, and `text` (the
    /// rendered report of `tessera compile --report`).
    #[getter]
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        report_dict(py, &self.compiled.report)
    }

    /// A deduplicated program's map from its parameters to the original's arguments
    /// (`dedup=True`), else None.
    #[getter]
    fn argument_map(&self) -> Option<Vec<usize>> {
        self.compiled.argument_map.clone()
    }

    /// The per-device program as a serialized HloModuleProto ready for a PJRT client: MANUAL
    /// shardings on the entry parameters and root (so that XLA does not partition it again),
    /// no other shardings, default entry layouts, `num_partitions` devices.
    fn per_device_proto<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let n = self.compiled.report.num_partitions.max(1) as usize;
        let bytes = py.detach(|| {
            harness::prepare_partitioned(&self.compiled.module, n)
                .map(|m| tessera_hlo::proto::to_proto_bytes(&m))
                .map_err(err)
        })?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn __repr__(&self) -> String {
        let r = &self.compiled.report;
        format!(
            "<tessera.CompileResult {} for {} partitions: {} instructions per device>",
            r.module,
            r.num_partitions,
            self.compiled.module.instruction_count()
        )
    }
}

fn compile_options(
    num_partitions: i64,
    num_replicas: i64,
    memory_limit: Option<i64>,
    dedup: bool,
    pass_options: Vec<String>,
) -> CompileOptions {
    let mut o = CompileOptions::new(num_partitions);
    o.num_replicas = num_replicas;
    o.memory_limit = memory_limit;
    o.dedup = dedup;
    o.pass_options = pass_options;
    o.measure_unpartitioned = true;
    o
}

/// Compiles a frontend's sharded module into the program every device runs: sharding
/// propagation, [variable dedup], SPMD partitioning, scheduling, [rematerialization under
/// `memory_limit` bytes per device]. `pass_options`: `{"PASS.KEY": value}` as
/// `tessera compile --pass-option`.
#[pyfunction]
#[pyo3(signature = (module, num_partitions = 8, num_replicas = 1, memory_limit = None, dedup = false, pass_options = None))]
fn compile(
    py: Python<'_>,
    module: &Bound<'_, PyAny>,
    num_partitions: i64,
    num_replicas: i64,
    memory_limit: Option<i64>,
    dedup: bool,
    pass_options: Option<&Bound<'_, PyAny>>,
) -> PyResult<CompileResult> {
    let m = module_arg(py, module)?;
    let o = compile_options(
        num_partitions,
        num_replicas,
        memory_limit,
        dedup,
        pass_options_arg(pass_options)?,
    );
    let compiled = py.detach(move || tessera_compile::compile(m, &o).map_err(err))?;
    Ok(CompileResult { compiled })
}

/// Why each collective of the partitioned program exists: the instruction and resharding that
/// made it and the bytes each device receives (`tessera explain`).
#[pyfunction]
#[pyo3(signature = (module, num_partitions = 8, pass_options = None))]
fn explain(
    py: Python<'_>,
    module: &Bound<'_, PyAny>,
    num_partitions: i64,
    pass_options: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let m = module_arg(py, module)?;
    let mut o = CompileOptions::new(num_partitions);
    o.pass_options = pass_options_arg(pass_options)?;
    py.detach(move || {
        tessera_compile::compile(m, &o)
            .map(|c| c.report.explain())
            .map_err(err)
    })
}

/// Peak memory of a module along its schedule (the module's own, else the default scheduler's,
/// or `scheduler`'s): a dict with `peak_bytes`, `output_bytes`, `parameter_bytes`, `peak_at`
/// (the instruction at the peak) and `live_at_peak` (the buffers live there, largest first:
/// `instruction`, `index`, `shape`, `bytes`).
#[pyfunction]
#[pyo3(signature = (module, scheduler = None))]
fn memory<'py>(
    py: Python<'py>,
    module: &Bound<'_, PyAny>,
    scheduler: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    use tessera_hlo::analysis::shape_size;
    use tessera_remat::schedule_memory::{module_memory, MemoryOptions};
    use tessera_remat::{schedule_module, SchedulerKind};
    let mut m = module_arg(py, module)?;
    let kind = match scheduler {
        Some(s) => Some(s.parse::<SchedulerKind>().map_err(err)?),
        None if m.schedule.is_none() => Some(SchedulerKind::Default),
        None => None,
    };
    type Live = (String, Vec<i64>, String, i64);
    let (mem, at, live): (_, Option<String>, Vec<Live>) = py.detach(|| {
        if let Some(k) = kind {
            schedule_module(&mut m, k, &shape_size).map_err(err)?;
        }
        let mem = module_memory(&m, None, &shape_size, MemoryOptions::default()).map_err(err)?;
        let entry = mem.entry_memory();
        let at = entry
            .peak_instruction()
            .map(|i| format!("%{}", m.instr(i).name()));
        let live = entry
            .live_at_peak()
            .iter()
            .map(|b| {
                (
                    format!("%{}", m.instr(b.defining).name()),
                    b.index.iter().map(|&i| i as i64).collect(),
                    tessera_runtime::host::shape_string(&b.shape),
                    b.allocated,
                )
            })
            .collect();
        Ok::<_, PyErr>((mem, at, live))
    })?;
    let d = PyDict::new(py);
    d.set_item("peak_bytes", mem.peak_bytes)?;
    d.set_item("output_bytes", mem.output_bytes)?;
    d.set_item("parameter_bytes", mem.parameter_bytes)?;
    d.set_item("peak_at", at)?;
    let l = PyList::empty(py);
    for (name, index, shape, bytes) in live {
        let b = PyDict::new(py);
        b.set_item("instruction", name)?;
        b.set_item("index", index)?;
        b.set_item("shape", shape)?;
        b.set_item("bytes", bytes)?;
        l.append(b)?;
    }
    d.set_item("live_at_peak", l)?;
    Ok(d)
}

/// One array as the Python half hands it over: (XLA type name, dims, row-major bytes).
type Triple = (String, Vec<i64>, Vec<u8>);

fn to_host(i: usize, (ty, dims, data): Triple) -> PyResult<HostArray> {
    let t = ElementType::from_name(&ty)
        .ok_or_else(|| err(format!("input {i}: unknown element type `{ty}`")))?;
    HostArray::new(t, dims, data).map_err(|e| err(format!("input {i}: {e}")))
}

fn from_host(a: HostArray) -> Triple {
    (a.ty.name().to_string(), a.dims, a.data)
}

/// A CPU client with `n` devices, one per count for the life of the process (creating one
/// costs tens of milliseconds).
fn cpu_client(n: usize) -> PyResult<Client> {
    static CLIENTS: OnceLock<Mutex<HashMap<usize, Client>>> = OnceLock::new();
    let mut map = CLIENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(c) = map.get(&n) {
        return Ok(c.clone());
    }
    let c = Client::cpu(n).map_err(err)?;
    map.insert(n, c.clone());
    Ok(c)
}

fn check_devices(devices: usize) -> PyResult<()> {
    if devices == 0 || devices > 256 {
        return Err(err(format!(
            "devices={devices}: the CPU plugin runs 1 to 256 devices"
        )));
    }
    Ok(())
}

/// `tessera.run` without the numpy conversion: global inputs (one per argument) on `devices`
/// devices, or, with `per_device`, one list of inputs per device.
#[pyfunction]
#[pyo3(signature = (module, inputs, devices = 1, per_device = false))]
fn _run(
    py: Python<'_>,
    module: &Bound<'_, PyAny>,
    inputs: &Bound<'_, PyAny>,
    devices: usize,
    per_device: bool,
) -> PyResult<Vec<Vec<Triple>>> {
    check_devices(devices)?;
    let m = module_arg(py, module)?;
    if per_device {
        let lists: Vec<Vec<Triple>> = inputs.extract()?;
        if lists.len() != devices {
            return Err(err(format!(
                "per_device: expected {devices} input lists (one per device), got {}",
                lists.len()
            )));
        }
        let args = lists
            .into_iter()
            .map(|l| {
                l.into_iter()
                    .enumerate()
                    .map(|(i, t)| to_host(i, t))
                    .collect()
            })
            .collect::<PyResult<Vec<Vec<HostArray>>>>()?;
        return py.detach(move || {
            let client = cpu_client(devices)?;
            let prepared = harness::prepare_partitioned(&m, devices).map_err(err)?;
            let outs = harness::run_module(
                &client,
                &prepared,
                &harness::per_device_options(devices),
                &args,
            )
            .map_err(err)?;
            Ok(outs
                .into_iter()
                .map(|l| l.into_iter().map(from_host).collect())
                .collect())
        });
    }
    let list: Vec<Triple> = inputs.extract()?;
    let values = list
        .into_iter()
        .enumerate()
        .map(|(i, t)| to_host(i, t).map(HostValue::Array))
        .collect::<PyResult<Vec<_>>>()?;
    py.detach(move || {
        let client = cpu_client(devices)?;
        let outs: Vec<HostArray> = if devices == 1 {
            harness::run_original(&client, &m, &values).map_err(err)?
        } else {
            harness::run_xla_partitioned(&client, &m, devices, &values)
                .map_err(err)?
                .into_iter()
                .enumerate()
                .map(|(k, a)| {
                    a.value
                        .as_array()
                        .cloned()
                        .ok_or_else(|| err(format!("output {k} is a nested tuple: not supported")))
                })
                .collect::<PyResult<_>>()?
        };
        Ok(vec![outs.into_iter().map(from_host).collect()])
    })
}

/// One output of a comparison: index, shape, passed, max abs error, max rel error, elements
/// outside the tolerance.
type OutputRow = (usize, String, bool, f64, f64, u64);

/// `tessera.compare` without the numpy conversion: the runtime's equivalence harness
/// (`tessera compare`), returning (passed, report text, per-output dicts).
#[pyfunction]
#[pyo3(signature = (original, partitioned, devices, inputs = None, seed = 0, rtol = None, atol = None, reference = "auto", native = false))]
#[allow(clippy::too_many_arguments)]
fn _compare(
    py: Python<'_>,
    original: &Bound<'_, PyAny>,
    partitioned: &Bound<'_, PyAny>,
    devices: usize,
    inputs: Option<Vec<Triple>>,
    seed: u64,
    rtol: Option<f64>,
    atol: Option<f64>,
    reference: &str,
    native: bool,
) -> PyResult<(bool, String, Vec<OutputRow>, String)> {
    check_devices(devices)?;
    // Shardy's shape custom-calls run only inside jax's pipeline: read as compile reads them.
    let original = runnable(module_arg(py, original)?)?;
    let partitioned = runnable(module_arg(py, partitioned)?)?;
    let reference = match reference {
        "auto" => Reference::Auto,
        "single-device" => Reference::SingleDevice,
        "xla-spmd" => Reference::XlaPartitioned,
        r => {
            return Err(err(format!(
                "reference={r:?}: expected \"auto\", \"single-device\" or \"xla-spmd\""
            )))
        }
    };
    let float_tolerance = match (rtol, atol) {
        (Some(rel), Some(abs)) => Some(Tolerance { rel, abs }),
        (None, None) => None,
        _ => return Err(err("rtol and atol go together: give both or neither")),
    };
    let inputs = inputs
        .map(|l| {
            l.into_iter()
                .enumerate()
                .map(|(i, t)| to_host(i, t).map(HostValue::Array))
                .collect::<PyResult<Vec<_>>>()
        })
        .transpose()?;
    py.detach(move || {
        let inputs = match inputs {
            Some(i) => i,
            None => harness::random_inputs(&original, seed).map_err(err)?,
        };
        let client = cpu_client(devices)?;
        let r = harness::check_equivalence(
            &client,
            &original,
            &partitioned,
            devices,
            &inputs,
            CompareOptions {
                float_tolerance,
                reference,
                precision: if native {
                    Precision::Native
                } else {
                    Precision::Wide
                },
                ..CompareOptions::default()
            },
        )
        .map_err(err)?;
        let outs = r
            .outputs
            .iter()
            .map(|o| {
                (
                    o.index,
                    o.shape.clone(),
                    o.passed(),
                    o.max_abs_error,
                    o.max_rel_error,
                    o.mismatched,
                )
            })
            .collect();
        Ok((r.passed(), r.to_string(), outs, r.outcome().to_string()))
    })
}

/// The `tessera._tessera` extension module.
#[pymodule]
fn _tessera(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TesseraError", m.py().get_type::<TesseraError>())?;
    m.add_class::<Module>()?;
    m.add_class::<CompileResult>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(explain, m)?)?;
    m.add_function(wrap_pyfunction!(memory, m)?)?;
    m.add_function(wrap_pyfunction!(_run, m)?)?;
    m.add_function(wrap_pyfunction!(_compare, m)?)?;
    Ok(())
}
