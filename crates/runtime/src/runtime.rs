//! The execution layer: a compilation cache, a store of device allocations
//! addressed by handles, execution with shape checks and input/output
//! aliasing, chained execution plans, and a memory manager that moves
//! least-recently-used buffers to host memory when a device budget is hit.
//!
//! Everything lives behind one [`Runtime`]; handles are plain integers valid
//! only for the runtime that issued them.
//!
//! Invariants kept here:
//! * A handle is either live (in the store) or rejected with
//!   [`Error::InvalidHandle`]; a donated input's handle is removed from the
//!   store in the same step that creates the output its buffer now backs.
//! * Reference counts: every handle returned to the caller carries one
//!   reference; a tuple holds one reference on each of its elements; an entry
//!   is freed when its count reaches zero.
//! * Memory: for every device with a budget, the bytes of resident arrays never
//!   exceed the budget after an operation returns; eviction copies the data to
//!   host before dropping the device buffer, so a failed eviction loses
//!   nothing.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::element::NativeType;
use crate::error::{Error, ErrorCode, Result};
use crate::options::CompileOptions;
use crate::pjrt::{bytes_to_vec, Buffer, Client, ExecuteOptions, LoadedExecutable, Program};
use crate::shape::ArrayShape;
use crate::signature::{self, Alias};

/// A compiled program in the runtime's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecutableHandle(u64);

/// An array or tuple in the runtime's buffer store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferHandle(u64);

impl fmt::Display for ExecutableHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exe{}", self.0)
    }
}
impl fmt::Display for BufferHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buf{}", self.0)
    }
}

/// What to compile: the program, how, and which outputs alias which inputs.
#[derive(Clone, Debug)]
pub struct CompileRequest {
    pub program: Program,
    pub options: CompileOptions,
    /// (output index, parameter number) pairs; declared in the program by the
    /// runtime (see [`signature::with_aliases`]).
    pub aliases: Vec<Alias>,
    /// Entry parameter shapes; read from the program when `None`.
    pub parameter_shapes: Option<Vec<ArrayShape>>,
}

impl CompileRequest {
    pub fn new(program: Program, options: CompileOptions) -> Self {
        Self {
            program,
            options,
            aliases: Vec::new(),
            parameter_shapes: None,
        }
    }

    /// Adds (output index, parameter number) aliases.
    pub fn with_aliases(mut self, pairs: &[(usize, usize)]) -> Self {
        self.aliases.extend(
            pairs
                .iter()
                .map(|&(output, parameter)| Alias { output, parameter }),
        );
        self
    }
}

/// Per-execution switches (seed 002's execution config).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecuteConfig {
    /// Drop the caller's reference to every input handle after the run. An
    /// aliased input whose handle holds the only reference is donated: its
    /// buffer becomes the output's.
    pub release_inputs: bool,
    /// Return the outputs of each device as separate handles instead of one
    /// tuple handle.
    pub explode_tuple: bool,
    /// Release the caller's reference to the executable after the run.
    pub release_executable: bool,
}

/// Read-only facts about a cached executable.
#[derive(Clone, Debug)]
pub struct ExecutableInfo {
    pub parameter_shapes: Vec<ArrayShape>,
    pub output_shapes: Vec<ArrayShape>,
    pub aliases: Vec<Alias>,
    /// Client device indices of one launch, in argument-list order.
    pub devices: Vec<usize>,
}

/// Counters of one device's memory manager.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes of arrays currently on the device.
    pub resident_bytes: u64,
    /// Bytes of arrays of this device currently held in host memory.
    pub host_bytes: u64,
    pub budget: Option<u64>,
    pub evictions: u64,
    pub restores: u64,
    /// Executions retried after the plugin reported exhausted memory.
    pub retries: u64,
    /// Input buffers the plugin consumed to back an aliased output.
    pub donated: u64,
}

/// One input of a plan step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanInput {
    /// An existing handle (the plan does not consume it).
    Handle(BufferHandle),
    /// Output `index` of an earlier step, on the same device position.
    Output { step: usize, index: usize },
    /// The device variable of a resource (by fingerprint) on the step's device: its current
    /// value when the step runs. A step whose executable aliases this parameter to an output
    /// updates the variable in place (the old buffer is donated).
    Variable(u64),
}

/// Where a parameter of an executable takes its value from (seed 000's variable
/// arguments bound through seed 002's handles).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamSource {
    /// The device variable of a resource, by fingerprint.
    Variable(u64),
    /// Entry `i` of the caller's argument list (the arguments that are not variables).
    Argument(usize),
}

/// The parameters of one executable, bound to device variables or caller arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VariableBinding {
    pub params: Vec<ParamSource>,
}

impl VariableBinding {
    /// Binds parameters through an argument map: `resources[k]` is the resource fingerprint
    /// of the caller's argument `k` (`None`: a plain argument) and `map[k]` the parameter it
    /// goes to. A parameter receiving a resource is bound to that variable (all its
    /// arguments must name the same one); the others take the plain arguments in parameter
    /// order.
    pub fn through_map(resources: &[Option<u64>], map: &[usize]) -> Result<VariableBinding> {
        if resources.len() != map.len() {
            return Err(Error::InvalidArgument(format!(
                "{} argument resources for an argument map of {} entries",
                resources.len(),
                map.len()
            )));
        }
        let n = map.iter().max().map_or(0, |&p| p + 1);
        let mut by_param: Vec<Option<(usize, Option<u64>)>> = vec![None; n];
        for (k, (&p, &r)) in map.iter().zip(resources).enumerate() {
            match by_param[p] {
                None => by_param[p] = Some((k, r)),
                Some((j, q)) if q != r => {
                    return Err(Error::InvalidArgument(format!(
                        "arguments {j} and {k} go to parameter {p} but are not the same variable"
                    )))
                }
                Some(_) => {}
            }
        }
        let mut plain = 0;
        let params = by_param
            .into_iter()
            .enumerate()
            .map(|(p, e)| match e {
                Some((_, Some(fp))) => Ok(ParamSource::Variable(fp)),
                Some((_, None)) => {
                    plain += 1;
                    Ok(ParamSource::Argument(plain - 1))
                }
                None => Err(Error::InvalidArgument(format!(
                    "no argument goes to parameter {p}"
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(VariableBinding { params })
    }

    /// How many plain arguments a call takes.
    pub fn num_arguments(&self) -> usize {
        self.params
            .iter()
            .filter(|p| matches!(p, ParamSource::Argument(_)))
            .count()
    }
}

/// One execution of a plan.
#[derive(Clone, Debug)]
pub struct PlanStep {
    pub executable: ExecutableHandle,
    /// One argument list per device of the executable.
    pub args: Vec<Vec<PlanInput>>,
}

/// A DAG of executions, run in order; only `outputs` survive it.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub steps: Vec<PlanStep>,
    /// (step, output index) pairs to keep.
    pub outputs: Vec<(usize, usize)>,
}

enum Placement {
    Device(Buffer),
    Host(Vec<u8>),
}

struct ArrayEntry {
    /// Index into the client's addressable devices.
    device: usize,
    shape: ArrayShape,
    bytes: u64,
    data: Placement,
    last_use: u64,
    pins: u32,
}

enum Node {
    Array(ArrayEntry),
    Tuple(Vec<BufferHandle>),
}

struct StoreEntry {
    node: Node,
    refs: u32,
}

struct CacheEntry {
    exe: Arc<LoadedExecutable>,
    info: Arc<ExecutableInfo>,
    key: CacheKey,
    refs: u32,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    format: &'static str,
    code: Vec<u8>,
    options: Vec<u8>,
    aliases: Vec<Alias>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    clock: u64,
    by_key: HashMap<CacheKey, ExecutableHandle>,
    executables: HashMap<ExecutableHandle, CacheEntry>,
    buffers: HashMap<BufferHandle, StoreEntry>,
    memory: Vec<MemoryStats>,
    compilations: u64,
    /// Device variables: (resource fingerprint, device index) -> the array holding the
    /// variable's current value (the store holds one reference on it).
    variables: std::collections::BTreeMap<(u64, usize), BufferHandle>,
    /// Host-to-device copies made to initialise variables.
    variable_uploads: u64,
    /// The client, for moving evicted arrays back.
    restorer: Option<Client>,
}

/// The execution layer over one PJRT client.
pub struct Runtime {
    client: Client,
    state: Mutex<State>,
}

impl Runtime {
    pub fn new(client: Client) -> Self {
        let n = client.devices().len();
        let state = State {
            next_id: 1,
            memory: vec![MemoryStats::default(); n],
            restorer: Some(client.clone()),
            ..State::default()
        };
        Self {
            client,
            state: Mutex::new(state),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ---------------------------------------------------------------- cache

    /// Compiles `request` unless an identical one (same program bytes, options
    /// and aliases) is cached; either way the caller gets one reference.
    pub fn compile(&self, request: &CompileRequest) -> Result<ExecutableHandle> {
        let key = cache_key(request)?;
        let aliases = key.aliases.clone();
        if let Some(h) = self.lock().retain_cached(&key) {
            return Ok(h);
        }
        // Compile without holding the lock; a concurrent identical request
        // may win the race, in which case its entry is used.
        let parameter_shapes = match &request.parameter_shapes {
            Some(p) => p.clone(),
            None => signature::parameter_shapes(&request.program)?,
        };
        if let Some(a) = aliases
            .iter()
            .find(|a| a.parameter >= parameter_shapes.len())
        {
            return Err(Error::InvalidArgument(format!(
                "alias (output {}, parameter {}) is out of range: {} parameters",
                a.output,
                a.parameter,
                parameter_shapes.len()
            )));
        }
        let program = signature::with_aliases(&request.program, &aliases)?;
        let exe = self.client.compile(&program, &request.options)?;
        let output_shapes = exe.output_shapes()?;
        for a in &aliases {
            let (Some(p), Some(o)) = (
                parameter_shapes.get(a.parameter),
                output_shapes.get(a.output),
            ) else {
                return Err(Error::InvalidArgument(format!(
                    "alias (output {}, parameter {}) is out of range: {} outputs, {} parameters",
                    a.output,
                    a.parameter,
                    output_shapes.len(),
                    parameter_shapes.len()
                )));
            };
            if p != o {
                return Err(Error::ShapeMismatch(format!(
                    "alias (output {}, parameter {}): output is {o}, parameter is {p}",
                    a.output, a.parameter
                )));
            }
        }
        let devices = exe
            .devices()
            .iter()
            .map(|d| {
                self.client
                    .devices()
                    .iter()
                    .position(|c| c.id() == d.id())
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!("device {} is not addressable", d.id()))
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let info = Arc::new(ExecutableInfo {
            parameter_shapes,
            output_shapes,
            aliases,
            devices,
        });
        let mut st = self.lock();
        if let Some(h) = st.retain_cached(&key) {
            return Ok(h);
        }
        let h = ExecutableHandle(st.fresh_id());
        st.compilations += 1;
        st.by_key.insert(key.clone(), h);
        st.executables.insert(
            h,
            CacheEntry {
                exe: Arc::new(exe),
                info,
                key,
                refs: 1,
            },
        );
        Ok(h)
    }

    /// The handle of an already compiled, identical request, if any, without
    /// compiling and without adding a reference.
    pub fn lookup(&self, request: &CompileRequest) -> Result<Option<ExecutableHandle>> {
        let key = cache_key(request)?;
        Ok(self.lock().by_key.get(&key).copied())
    }

    /// Facts about a cached executable.
    pub fn executable_info(&self, h: ExecutableHandle) -> Result<Arc<ExecutableInfo>> {
        let st = self.lock();
        Ok(st.executable(h)?.info.clone())
    }

    /// Drops one reference; the executable is unloaded with the last one.
    pub fn release_executable(&self, h: ExecutableHandle) -> Result<()> {
        self.lock().release_executable(h)
    }

    /// Number of programs actually compiled (cache misses) so far.
    pub fn compilations(&self) -> u64 {
        self.lock().compilations
    }

    /// Number of live cached executables.
    pub fn cached_executables(&self) -> usize {
        self.lock().executables.len()
    }

    // ---------------------------------------------------------------- store

    /// Copies a host array to device `device` (client device index).
    pub fn upload<T: NativeType>(
        &self,
        device: usize,
        data: &[T],
        dims: &[i64],
    ) -> Result<BufferHandle> {
        // SAFETY: NativeType is plain data without padding.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        self.upload_bytes(device, &ArrayShape::new(T::TYPE, dims), bytes)
    }

    /// Copies a dense row-major host array, given as bytes, to a device.
    pub fn upload_bytes(
        &self,
        device: usize,
        shape: &ArrayShape,
        bytes: &[u8],
    ) -> Result<BufferHandle> {
        let size = shape
            .byte_size()
            .ok_or_else(|| Error::InvalidArgument(format!("invalid shape {shape}")))?;
        let mut st = self.lock();
        let dev = self.client.devices().get(device).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "device index {device} out of range (client has {})",
                self.client.devices().len()
            ))
        })?;
        st.make_room(device, size, &[])?;
        let buf =
            self.client
                .buffer_from_host_bytes(shape.element_type, bytes, &shape.dims, dev)?;
        Ok(st.insert_array(device, shape.clone(), size, buf))
    }

    /// Reads an array back (from the device, or from host memory if it was
    /// evicted, without moving it back).
    pub fn download_bytes(&self, h: BufferHandle) -> Result<(ArrayShape, Vec<u8>)> {
        let mut st = self.lock();
        let tick = st.tick();
        let a = st.array_mut(h)?;
        a.last_use = tick;
        let bytes = match &a.data {
            Placement::Device(b) => b.to_host_bytes()?,
            Placement::Host(v) => v.clone(),
        };
        Ok((a.shape.clone(), bytes))
    }

    /// Reads an array back as `T`s.
    pub fn download<T: NativeType>(&self, h: BufferHandle) -> Result<Vec<T>> {
        let (shape, bytes) = self.download_bytes(h)?;
        if shape.element_type != T::TYPE {
            return Err(Error::ShapeMismatch(format!(
                "{h} is {shape}, asked for {} elements",
                T::TYPE
            )));
        }
        Ok(bytes_to_vec(&bytes))
    }

    /// Shape of an array handle.
    pub fn array_shape(&self, h: BufferHandle) -> Result<ArrayShape> {
        Ok(self.lock().array(h)?.shape.clone())
    }

    /// Client device index of an array handle.
    pub fn device_of(&self, h: BufferHandle) -> Result<usize> {
        Ok(self.lock().array(h)?.device)
    }

    /// Makes a tuple of existing handles; the tuple takes its own reference on
    /// each element (the caller's handles stay valid).
    pub fn make_tuple(&self, elements: &[BufferHandle]) -> Result<BufferHandle> {
        let mut st = self.lock();
        for &e in elements {
            st.entry(e)?;
        }
        for &e in elements {
            st.entry_mut(e)?.refs += 1;
        }
        Ok(st.insert(Node::Tuple(elements.to_vec())))
    }

    /// Number of elements of a tuple handle.
    pub fn tuple_len(&self, h: BufferHandle) -> Result<usize> {
        match &self.lock().entry(h)?.node {
            Node::Tuple(e) => Ok(e.len()),
            Node::Array(a) => Err(Error::InvalidArgument(format!(
                "{h} is an array ({}), not a tuple",
                a.shape
            ))),
        }
    }

    /// A new reference to element `index` of a tuple (a sub-buffer handle).
    pub fn tuple_element(&self, h: BufferHandle, index: usize) -> Result<BufferHandle> {
        let mut st = self.lock();
        let e = match &st.entry(h)?.node {
            Node::Tuple(elems) => *elems.get(index).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{h} has {} elements, asked for element {index}",
                    elems.len()
                ))
            })?,
            Node::Array(_) => {
                return Err(Error::InvalidArgument(format!("{h} is not a tuple")));
            }
        };
        st.entry_mut(e)?.refs += 1;
        Ok(e)
    }

    /// Adds a reference to a handle.
    pub fn retain(&self, h: BufferHandle) -> Result<()> {
        self.lock().entry_mut(h)?.refs += 1;
        Ok(())
    }

    /// Drops one reference; the allocation is freed with the last one.
    pub fn release(&self, h: BufferHandle) -> Result<()> {
        self.lock().release(h)
    }

    /// Current reference count of a handle.
    pub fn ref_count(&self, h: BufferHandle) -> Result<u32> {
        Ok(self.lock().entry(h)?.refs)
    }

    /// True if the handle is live.
    pub fn is_live(&self, h: BufferHandle) -> bool {
        self.lock().buffers.contains_key(&h)
    }

    /// Number of live handles (arrays and tuples).
    pub fn live_buffers(&self) -> usize {
        self.lock().buffers.len()
    }

    // ------------------------------------------------------------ variables

    /// Initialises the variable of `resource` on `device` from host bytes, unless it already
    /// lives there (seed 000's "seen ordinals": a variable is uploaded once per device and
    /// then stays across executions). Returns whether it uploaded.
    pub fn init_variable(
        &self,
        resource: u64,
        device: usize,
        shape: &ArrayShape,
        bytes: &[u8],
    ) -> Result<bool> {
        if self.lock().variables.contains_key(&(resource, device)) {
            return Ok(false);
        }
        let h = self.upload_bytes(device, shape, bytes)?;
        let mut st = self.lock();
        st.variables.insert((resource, device), h);
        st.variable_uploads += 1;
        Ok(true)
    }

    /// The array that holds the variable now (the store keeps its reference: `retain` it to
    /// keep this value past the next update).
    pub fn variable(&self, resource: u64, device: usize) -> Result<BufferHandle> {
        self.lock().variable(resource, device)
    }

    /// Reads a variable's current value.
    pub fn read_variable(&self, resource: u64, device: usize) -> Result<(ArrayShape, Vec<u8>)> {
        let h = self.variable(resource, device)?;
        self.download_bytes(h)
    }

    /// Drops a variable on every device.
    pub fn release_variable(&self, resource: u64) -> Result<()> {
        let mut st = self.lock();
        let keys: Vec<(u64, usize)> = st
            .variables
            .range((resource, 0)..=(resource, usize::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            let h = st.variables.remove(&k).expect("listed");
            st.release(h)?;
        }
        Ok(())
    }

    /// Host-to-device copies made by [`Runtime::init_variable`] so far.
    pub fn variable_uploads(&self) -> u64 {
        self.lock().variable_uploads
    }

    /// Number of (variable, device) pairs alive.
    pub fn variable_count(&self) -> usize {
        self.lock().variables.len()
    }

    /// Runs an executable whose parameters are bound by `binding`: variables come from the
    /// store (on each device of the executable), the others from `args` (one list of plain
    /// arguments per device). A variable parameter aliased to an output is updated in place:
    /// its old buffer is donated and the output becomes the variable (the caller also gets a
    /// reference to it). Returns the outputs per device, exploded or as one tuple as
    /// `config` says; `config.release_inputs` applies to the plain arguments.
    pub fn execute_bound(
        &self,
        exe: ExecutableHandle,
        binding: &VariableBinding,
        args: &[Vec<BufferHandle>],
        config: ExecuteConfig,
    ) -> Result<Vec<Vec<BufferHandle>>> {
        let mut st = self.lock();
        let info = st.executable(exe)?.info.clone();
        if binding.params.len() != info.parameter_shapes.len() {
            return Err(Error::InvalidArgument(format!(
                "the binding has {} parameters, {exe} takes {}",
                binding.params.len(),
                info.parameter_shapes.len()
            )));
        }
        if args.len() != info.devices.len() {
            return Err(Error::InvalidArgument(format!(
                "{exe} runs on {} devices, got {} argument lists",
                info.devices.len(),
                args.len()
            )));
        }
        let mut lists = Vec::with_capacity(args.len());
        let mut inputs = Vec::with_capacity(args.len());
        for (k, plain) in args.iter().enumerate() {
            let mut list = Vec::with_capacity(binding.params.len());
            let mut input = Vec::with_capacity(binding.params.len());
            for p in &binding.params {
                let h = match *p {
                    ParamSource::Variable(fp) => st.variable(fp, info.devices[k])?,
                    ParamSource::Argument(i) => plain.get(i).copied().ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "the binding reads plain argument {i}, list {k} has {}",
                            plain.len()
                        ))
                    })?,
                };
                list.push(h);
                input.push(match *p {
                    ParamSource::Variable(fp) => PlanInput::Variable(fp),
                    ParamSource::Argument(_) => PlanInput::Handle(h),
                });
            }
            lists.push(list);
            inputs.push(input);
        }
        let written = written_variables(&info, &inputs).map_err(Error::InvalidArgument)?;
        let release = |i: usize| match binding.params.get(i) {
            Some(ParamSource::Variable(_)) => written.iter().any(|w| w.parameter == i),
            Some(ParamSource::Argument(_)) => config.release_inputs,
            None => false,
        };
        let outs = self.execute_locked(&mut st, exe, &lists, &release, true)?;
        st.update_variables(&info, &written, &outs, &|_| true)?;
        let outs = if config.explode_tuple {
            outs
        } else {
            outs.into_iter()
                .map(|handles| vec![st.insert(Node::Tuple(handles))])
                .collect()
        };
        if config.release_executable {
            st.release_executable(exe)?;
        }
        Ok(outs)
    }

    // --------------------------------------------------------------- memory

    /// Sets (or clears) device `device`'s byte budget. Lowering it below the
    /// resident bytes evicts right away.
    pub fn set_memory_budget(&self, device: usize, budget: Option<u64>) -> Result<()> {
        let mut st = self.lock();
        st.memory
            .get_mut(device)
            .ok_or_else(|| Error::InvalidArgument(format!("no device index {device}")))?
            .budget = budget;
        st.make_room(device, 0, &[])
    }

    pub fn memory_stats(&self, device: usize) -> Result<MemoryStats> {
        self.lock()
            .memory
            .get(device)
            .copied()
            .ok_or_else(|| Error::InvalidArgument(format!("no device index {device}")))
    }

    /// True if the array is on its device (not evicted to host).
    pub fn is_resident(&self, h: BufferHandle) -> Result<bool> {
        Ok(matches!(self.lock().array(h)?.data, Placement::Device(_)))
    }

    /// A pinned array is never evicted.
    pub fn pin(&self, h: BufferHandle) -> Result<()> {
        let mut st = self.lock();
        let tick = st.tick();
        let a = st.array_mut(h)?;
        a.pins += 1;
        a.last_use = tick;
        let (device, placed) = (a.device, matches!(a.data, Placement::Device(_)));
        if !placed {
            if let Err(e) = st.restore(h, device, &[]) {
                st.array_mut(h)?.pins -= 1;
                return Err(e);
            }
        }
        Ok(())
    }

    pub fn unpin(&self, h: BufferHandle) -> Result<()> {
        let mut st = self.lock();
        let a = st.array_mut(h)?;
        if a.pins == 0 {
            return Err(Error::InvalidArgument(format!("{h} is not pinned")));
        }
        a.pins -= 1;
        Ok(())
    }

    // ------------------------------------------------------------ execution

    /// Runs a cached executable. `args[k]` is the argument list of the k-th
    /// device of the executable. Returns, per device, one tuple handle of the
    /// outputs, or the output handles themselves with `explode_tuple`.
    pub fn execute(
        &self,
        exe: ExecutableHandle,
        args: &[Vec<BufferHandle>],
        config: ExecuteConfig,
    ) -> Result<Vec<Vec<BufferHandle>>> {
        let mut st = self.lock();
        let release = |_: usize| config.release_inputs;
        let out = self.execute_locked(&mut st, exe, args, &release, config.explode_tuple)?;
        if config.release_executable {
            st.release_executable(exe)?;
        }
        Ok(out)
    }

    /// `release(i)`: the caller gives up its reference to argument `i` of
    /// every list (which also makes it a donation candidate).
    fn execute_locked(
        &self,
        st: &mut State,
        exe_h: ExecutableHandle,
        args: &[Vec<BufferHandle>],
        release: &dyn Fn(usize) -> bool,
        explode_tuple: bool,
    ) -> Result<Vec<Vec<BufferHandle>>> {
        let (exe, info) = {
            let e = st.executable(exe_h)?;
            (e.exe.clone(), e.info.clone())
        };
        let n_dev = info.devices.len();
        if args.len() != n_dev {
            return Err(Error::InvalidArgument(format!(
                "{exe_h} runs on {n_dev} devices, got {} argument lists",
                args.len()
            )));
        }
        // Shape and placement checks, before anything changes.
        let where_ = |k: usize| {
            if n_dev > 1 {
                format!(" (argument list {k})")
            } else {
                String::new()
            }
        };
        for (k, list) in args.iter().enumerate() {
            if list.len() != info.parameter_shapes.len() {
                return Err(Error::ShapeMismatch(format!(
                    "{exe_h} takes {} arguments, got {}{}",
                    info.parameter_shapes.len(),
                    list.len(),
                    where_(k)
                )));
            }
            for (i, (&h, want)) in list.iter().zip(&info.parameter_shapes).enumerate() {
                match &st.entry(h)?.node {
                    Node::Tuple(e) => {
                        return Err(Error::ShapeMismatch(format!(
                            "argument {i}: expected {want}, got a tuple of {} elements{}",
                            e.len(),
                            where_(k)
                        )));
                    }
                    Node::Array(a) => {
                        if a.shape != *want {
                            return Err(Error::ShapeMismatch(format!(
                                "argument {i}: expected {want}, got {}{}",
                                a.shape,
                                where_(k)
                            )));
                        }
                        if a.device != info.devices[k] {
                            return Err(Error::InvalidArgument(format!(
                                "argument {i}: {h} is on device index {}, the executable runs list {k} on device index {}",
                                a.device, info.devices[k]
                            )));
                        }
                    }
                }
            }
        }

        // Donation: an aliased parameter is donated only if, on every device,
        // the caller gives up a handle that is the sole reference and that
        // appears once in its list. Otherwise the plugin copies.
        let mut donated_params = Vec::new();
        let mut non_donatable = Vec::new();
        for a in &info.aliases {
            let p = a.parameter;
            let ok = release(p)
                && args.iter().all(|list| {
                    let h = list[p];
                    list.iter().filter(|&&x| x == h).count() == 1
                        && st.entry(h).is_ok_and(|e| e.refs == 1)
                });
            if ok {
                donated_params.push(p);
            } else {
                non_donatable.push(p as i64);
            }
        }

        // Bring inputs back to their devices and pin them for the call.
        let all_inputs: Vec<BufferHandle> = args.iter().flatten().copied().collect();
        for &h in &all_inputs {
            st.array_mut(h)?.pins += 1;
        }
        let result = self.run_pinned(st, &exe, &info, args, &donated_params, &non_donatable);
        for &h in &all_inputs {
            if let Ok(a) = st.array_mut(h) {
                a.pins -= 1;
            }
        }
        let outputs = result?;

        // Donated inputs are gone; their handles die with them.
        for &p in &donated_params {
            for list in args {
                let h = list[p];
                if let Some(StoreEntry {
                    node: Node::Array(a),
                    ..
                }) = st.buffers.remove(&h)
                {
                    // The plugin marks a buffer it took over as deleted.
                    let taken = match &a.data {
                        Placement::Device(b) => b.is_deleted().unwrap_or(false),
                        Placement::Host(_) => false,
                    };
                    let m = &mut st.memory[a.device];
                    m.resident_bytes -= a.bytes;
                    m.donated += u64::from(taken);
                }
            }
        }
        let mut result: Vec<Vec<BufferHandle>> = Vec::with_capacity(n_dev);
        for (k, outs) in outputs.into_iter().enumerate() {
            let device = info.devices[k];
            let handles: Vec<BufferHandle> = outs
                .into_iter()
                .zip(&info.output_shapes)
                .map(|(b, shape)| {
                    let size = shape.byte_size().unwrap_or(0);
                    st.insert_array(device, shape.clone(), size, b)
                })
                .collect();
            if explode_tuple {
                result.push(handles);
            } else {
                result.push(vec![st.insert(Node::Tuple(handles))]);
            }
        }
        let mut seen = std::collections::HashSet::new();
        for list in args {
            for (i, &h) in list.iter().enumerate() {
                if release(i) && seen.insert(h) && st.buffers.contains_key(&h) {
                    st.release(h)?;
                }
            }
        }
        Ok(result)
    }

    /// Makes inputs resident, reserves room for the outputs, runs, and retries
    /// once after evicting everything evictable if the plugin reports
    /// exhausted memory.
    fn run_pinned(
        &self,
        st: &mut State,
        exe: &LoadedExecutable,
        info: &ExecutableInfo,
        args: &[Vec<BufferHandle>],
        donated: &[usize],
        non_donatable: &[i64],
    ) -> Result<Vec<Vec<Buffer>>> {
        let pinned: Vec<BufferHandle> = args.iter().flatten().copied().collect();
        for (k, list) in args.iter().enumerate() {
            let device = info.devices[k];
            for &h in list {
                if matches!(st.array(h)?.data, Placement::Host(_)) {
                    st.restore(h, device, &pinned)?;
                }
            }
            let out_bytes: u64 = info
                .output_shapes
                .iter()
                .map(|s| s.byte_size().unwrap_or(0))
                .sum();
            let donated_bytes: u64 = donated
                .iter()
                .map(|&p| st.array(list[p]).map_or(0, |a| a.bytes))
                .sum();
            st.make_room(device, out_bytes.saturating_sub(donated_bytes), &pinned)?;
        }
        let tick = st.tick();
        for &h in &pinned {
            st.array_mut(h)?.last_use = tick;
        }
        let options = ExecuteOptions {
            non_donatable_input_indices: non_donatable.to_vec(),
            launch_id: 0,
        };
        let mut attempt = 0;
        loop {
            let lists: Vec<Vec<&Buffer>> = args
                .iter()
                .map(|l| {
                    l.iter()
                        .map(|&h| match &st.array(h).expect("checked above").data {
                            Placement::Device(b) => b,
                            Placement::Host(_) => unreachable!("inputs were restored and pinned"),
                        })
                        .collect()
                })
                .collect();
            match exe.execute(&lists, &options) {
                Err(e) if attempt == 0 && e.code() == Some(ErrorCode::ResourceExhausted) => {
                    attempt += 1;
                    for &d in &info.devices {
                        st.memory[d].retries += 1;
                        st.evict_all(d)?;
                    }
                }
                other => return other,
            }
        }
    }

    /// Runs a plan's steps in order. Returns, for each requested output, one
    /// handle per device; every other intermediate result is released, also
    /// when a step fails.
    pub fn execute_plan(&self, plan: &Plan) -> Result<Vec<Vec<BufferHandle>>> {
        let mut st = self.lock();
        let mut produced: Vec<Vec<Vec<BufferHandle>>> = Vec::with_capacity(plan.steps.len());
        let outcome = self.run_plan(&mut st, plan, &mut produced);
        let kept = match outcome {
            Ok(()) => {
                let mut kept = Vec::with_capacity(plan.outputs.len());
                for &(step, index) in &plan.outputs {
                    let per_dev = plan_output(plan.steps.len(), &produced, step, index)
                        .map_err(|message| Error::Plan { step, message })?;
                    for &h in &per_dev {
                        st.entry_mut(h)?.refs += 1;
                    }
                    kept.push(per_dev);
                }
                Ok(kept)
            }
            Err(e) => Err(e),
        };
        // Handles are never reused, so a produced handle that is no longer
        // live was consumed by a later step (released or donated).
        for h in produced.into_iter().flatten().flatten() {
            if st.buffers.contains_key(&h) {
                st.release(h)?;
            }
        }
        kept
    }

    fn run_plan(
        &self,
        st: &mut State,
        plan: &Plan,
        produced: &mut Vec<Vec<Vec<BufferHandle>>>,
    ) -> Result<()> {
        // Last step reading each (step, output) pair; requested outputs live on.
        let mut last_use: HashMap<(usize, usize), usize> = HashMap::new();
        for (s, step) in plan.steps.iter().enumerate() {
            for input in step.args.iter().flatten() {
                if let PlanInput::Output { step, index } = *input {
                    last_use.insert((step, index), s);
                }
            }
        }
        for &(step, index) in &plan.outputs {
            last_use.remove(&(step, index));
        }
        for (s, step) in plan.steps.iter().enumerate() {
            let info = st
                .executable(step.executable)
                .map_err(|e| Error::Plan {
                    step: s,
                    message: e.to_string(),
                })?
                .info
                .clone();
            // Variables this step writes through its aliases (updated after it runs).
            let written = written_variables(&info, &step.args)
                .map_err(|message| Error::Plan { step: s, message })?;
            // An intermediate read for the last time here is handed over to
            // the execution: released afterwards, donated if aliased; so is a
            // variable the step writes.
            let consumed = |i: usize| {
                step.args.iter().all(|list| match list.get(i) {
                    Some(PlanInput::Output { step, index }) => {
                        last_use.get(&(*step, *index)) == Some(&s)
                    }
                    Some(PlanInput::Variable(_)) => written.iter().any(|w| w.parameter == i),
                    _ => false,
                })
            };
            let args: Vec<Vec<BufferHandle>> = step
                .args
                .iter()
                .enumerate()
                .map(|(k, list)| {
                    list.iter()
                        .map(|input| match *input {
                            PlanInput::Handle(h) => Ok(h),
                            PlanInput::Variable(fp) => info
                                .devices
                                .get(k)
                                .ok_or_else(|| format!("no device position {k}"))
                                .and_then(|&d| st.variable(fp, d).map_err(|e| e.to_string())),
                            PlanInput::Output { step, index } => {
                                if step >= s {
                                    return Err(format!(
                                        "input refers to step {step}, which does not run before step {s}"
                                    ));
                                }
                                produced[step]
                                    .get(k)
                                    .and_then(|outs| outs.get(index))
                                    .copied()
                                    .ok_or_else(|| {
                                        format!("step {step} has no output {index} on device position {k}")
                                    })
                            }
                        })
                        .collect::<std::result::Result<Vec<_>, String>>()
                })
                .collect::<std::result::Result<Vec<_>, String>>()
                .map_err(|message| Error::Plan { step: s, message })?;
            let outs = self
                .execute_locked(st, step.executable, &args, &consumed, true)
                .map_err(|e| Error::Plan {
                    step: s,
                    message: e.to_string(),
                })?;
            // A written variable's output that nothing else in the plan reads goes to the
            // store outright (so that the next step can donate it again); one that is read
            // or requested is shared with the plan.
            let mut outs = outs;
            let shared =
                |o: usize| last_use.contains_key(&(s, o)) || plan.outputs.contains(&(s, o));
            st.update_variables(&info, &written, &outs, &shared)?;
            for w in written.iter().filter(|w| !shared(w.output)) {
                for list in outs.iter_mut() {
                    // Handles start at 1: 0 is never live, so the plan's final
                    // release skips it.
                    list[w.output] = BufferHandle(0);
                }
            }
            produced.push(outs);
        }
        Ok(())
    }
}

/// The cache key: exact program bytes, serialized options and the sorted
/// alias set (hashing the bytes is the fingerprint; equality is exact).
fn cache_key(request: &CompileRequest) -> Result<CacheKey> {
    request.options.validate()?;
    let mut aliases = request.aliases.clone();
    aliases.sort();
    aliases.dedup();
    Ok(CacheKey {
        format: request.program.format(),
        code: request.program.code().to_vec(),
        options: request.options.encode()?,
        aliases,
    })
}

fn plan_output(
    steps: usize,
    produced: &[Vec<Vec<BufferHandle>>],
    step: usize,
    index: usize,
) -> std::result::Result<Vec<BufferHandle>, String> {
    if step >= steps {
        return Err(format!(
            "requested output of step {step}, plan has {steps} steps"
        ));
    }
    produced[step]
        .iter()
        .map(|outs| {
            outs.get(index)
                .copied()
                .ok_or_else(|| format!("step {step} has no output {index}"))
        })
        .collect()
}

/// A variable a step writes: parameter `parameter` (the variable `resource` in every argument
/// list) aliased to output `output`.
struct WrittenVariable {
    parameter: usize,
    output: usize,
    resource: Vec<u64>,
}

/// The variables an execution writes through its aliases; a variable written twice (two
/// aliased parameters holding it) is refused.
fn written_variables(
    info: &ExecutableInfo,
    args: &[Vec<PlanInput>],
) -> std::result::Result<Vec<WrittenVariable>, String> {
    let mut out: Vec<WrittenVariable> = Vec::new();
    for a in &info.aliases {
        let resources: Vec<Option<u64>> = args
            .iter()
            .map(|list| match list.get(a.parameter) {
                Some(PlanInput::Variable(fp)) => Some(*fp),
                _ => None,
            })
            .collect();
        if resources.iter().all(Option::is_none) {
            continue;
        }
        let resource: Vec<u64> = resources
            .iter()
            .map(|r| {
                r.ok_or_else(|| {
                    format!(
                        "parameter {} is a variable on some devices only",
                        a.parameter
                    )
                })
            })
            .collect::<std::result::Result<_, _>>()?;
        if let Some(w) = out.iter().find(|w| w.resource == resource) {
            return Err(format!(
                "parameters {} and {} hold the same variable and are both written (outputs {} and {})",
                w.parameter, a.parameter, w.output, a.output
            ));
        }
        out.push(WrittenVariable {
            parameter: a.parameter,
            output: a.output,
            resource,
        });
    }
    Ok(out)
}

impl State {
    fn variable(&self, resource: u64, device: usize) -> Result<BufferHandle> {
        self.variables
            .get(&(resource, device))
            .copied()
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "variable {resource:#018x} is not initialised on device index {device}"
                ))
            })
    }

    /// After an execution: each written variable is now its aliased output (the old buffer
    /// was donated or released by the execution). Where `shared(output)`, the store takes a
    /// reference of its own; otherwise it takes over the execution's.
    fn update_variables(
        &mut self,
        info: &ExecutableInfo,
        written: &[WrittenVariable],
        outs: &[Vec<BufferHandle>],
        shared: &dyn Fn(usize) -> bool,
    ) -> Result<()> {
        for w in written {
            for (k, list) in outs.iter().enumerate() {
                let h = *list.get(w.output).ok_or_else(|| {
                    Error::InvalidArgument(format!("no output {} to update a variable", w.output))
                })?;
                if shared(w.output) {
                    self.entry_mut(h)?.refs += 1;
                }
                self.variables.insert((w.resource[k], info.devices[k]), h);
            }
        }
        Ok(())
    }

    /// The cached executable compiled for `key`, if any, with one more reference (the
    /// caller's).
    fn retain_cached(&mut self, key: &CacheKey) -> Option<ExecutableHandle> {
        let &h = self.by_key.get(key)?;
        self.executables
            .get_mut(&h)
            .expect("cache index is consistent")
            .refs += 1;
        Some(h)
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn executable(&self, h: ExecutableHandle) -> Result<&CacheEntry> {
        self.executables.get(&h).ok_or(Error::InvalidHandle {
            kind: "executable",
            handle: h.0,
        })
    }

    fn release_executable(&mut self, h: ExecutableHandle) -> Result<()> {
        let e = self.executables.get_mut(&h).ok_or(Error::InvalidHandle {
            kind: "executable",
            handle: h.0,
        })?;
        e.refs -= 1;
        if e.refs == 0 {
            let e = self.executables.remove(&h).expect("present");
            self.by_key.remove(&e.key);
        }
        Ok(())
    }

    fn entry(&self, h: BufferHandle) -> Result<&StoreEntry> {
        self.buffers.get(&h).ok_or(Error::InvalidHandle {
            kind: "buffer",
            handle: h.0,
        })
    }

    fn entry_mut(&mut self, h: BufferHandle) -> Result<&mut StoreEntry> {
        self.buffers.get_mut(&h).ok_or(Error::InvalidHandle {
            kind: "buffer",
            handle: h.0,
        })
    }

    fn array(&self, h: BufferHandle) -> Result<&ArrayEntry> {
        match &self.entry(h)?.node {
            Node::Array(a) => Ok(a),
            Node::Tuple(_) => Err(Error::InvalidArgument(format!(
                "{h} is a tuple, not an array"
            ))),
        }
    }

    fn array_mut(&mut self, h: BufferHandle) -> Result<&mut ArrayEntry> {
        match &mut self.entry_mut(h)?.node {
            Node::Array(a) => Ok(a),
            Node::Tuple(_) => Err(Error::InvalidArgument(format!(
                "{h} is a tuple, not an array"
            ))),
        }
    }

    fn insert(&mut self, node: Node) -> BufferHandle {
        let h = BufferHandle(self.fresh_id());
        self.buffers.insert(h, StoreEntry { node, refs: 1 });
        h
    }

    fn insert_array(
        &mut self,
        device: usize,
        shape: ArrayShape,
        bytes: u64,
        buf: Buffer,
    ) -> BufferHandle {
        let last_use = self.tick();
        self.memory[device].resident_bytes += bytes;
        self.insert(Node::Array(ArrayEntry {
            device,
            shape,
            bytes,
            data: Placement::Device(buf),
            last_use,
            pins: 0,
        }))
    }

    fn release(&mut self, h: BufferHandle) -> Result<()> {
        let mut work = vec![h];
        while let Some(h) = work.pop() {
            let e = self.entry_mut(h)?;
            e.refs -= 1;
            if e.refs > 0 {
                continue;
            }
            match self.buffers.remove(&h).expect("present").node {
                Node::Tuple(elems) => work.extend(elems),
                Node::Array(a) => {
                    let m = &mut self.memory[a.device];
                    match a.data {
                        Placement::Device(_) => m.resident_bytes -= a.bytes,
                        Placement::Host(_) => m.host_bytes -= a.bytes,
                    }
                }
            }
        }
        Ok(())
    }

    /// The arrays that could move from `device` to host memory (held on it and not pinned),
    /// each with its last use.
    fn evictable(&self, device: usize) -> impl Iterator<Item = (u64, BufferHandle)> + '_ {
        self.buffers
            .iter()
            .filter_map(move |(&h, e)| match &e.node {
                Node::Array(a)
                    if a.device == device
                        && a.pins == 0
                        && matches!(a.data, Placement::Device(_)) =>
                {
                    Some((a.last_use, h))
                }
                _ => None,
            })
    }

    /// Evicts least-recently-used unpinned arrays of `device` (never those in
    /// `keep`) until `needed` more bytes fit in its budget.
    fn make_room(&mut self, device: usize, needed: u64, keep: &[BufferHandle]) -> Result<()> {
        let Some(budget) = self.memory[device].budget else {
            return Ok(());
        };
        while self.memory[device].resident_bytes + needed > budget {
            let victim = self
                .evictable(device)
                .filter(|(_, h)| !keep.contains(h))
                .min();
            let Some((_, victim)) = victim else {
                let resident = self.memory[device].resident_bytes;
                return Err(Error::OutOfMemory {
                    device,
                    needed,
                    available: budget.saturating_sub(resident),
                    budget,
                });
            };
            self.evict(victim)?;
        }
        Ok(())
    }

    /// Moves one array to host memory. The device buffer is dropped only
    /// after the host copy succeeded.
    fn evict(&mut self, h: BufferHandle) -> Result<()> {
        let a = self.array_mut(h)?;
        let Placement::Device(buf) = &a.data else {
            return Ok(());
        };
        let bytes = buf.to_host_bytes()?;
        a.data = Placement::Host(bytes);
        let (device, size) = (a.device, a.bytes);
        let m = &mut self.memory[device];
        m.resident_bytes -= size;
        m.host_bytes += size;
        m.evictions += 1;
        Ok(())
    }

    fn evict_all(&mut self, device: usize) -> Result<()> {
        let victims: Vec<BufferHandle> = self.evictable(device).map(|(_, h)| h).collect();
        for h in victims {
            self.evict(h)?;
        }
        Ok(())
    }
}

impl State {
    /// Moves an evicted array back to its device, making room first.
    fn restore(&mut self, h: BufferHandle, device: usize, keep: &[BufferHandle]) -> Result<()> {
        let size = self.array(h)?.bytes;
        self.make_room(device, size, keep)?;
        let client = self
            .restorer
            .clone()
            .expect("restorer is set when the runtime is created");
        let a = self.array_mut(h)?;
        let Placement::Host(bytes) = &a.data else {
            return Ok(());
        };
        let buf = client.buffer_from_host_bytes(
            a.shape.element_type,
            bytes,
            &a.shape.dims,
            &client.devices()[device],
        )?;
        a.data = Placement::Device(buf);
        let m = &mut self.memory[device];
        m.host_bytes -= size;
        m.resident_bytes += size;
        m.restores += 1;
        Ok(())
    }
}
