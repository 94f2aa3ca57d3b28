//! Safe wrappers over the PJRT C API: plugin, client, devices, executables,
//! buffers and events.
//!
//! Ownership: every object keeps an `Arc` of what it needs to outlive
//! (a buffer keeps its client alive, a client keeps its plugin), so drop order
//! never matters. Plugins are loaded once per path and never unloaded: XLA
//! does not support being unloaded, and a process rarely loads more than one.
//!
//! Invariant: every `PJRT_Event` this crate receives is awaited and its error
//! checked before the result it guards is used, even when the event reports
//! itself ready (a finished event can carry an error).

use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex, OnceLock};

use crate::element::{ElementType, NativeType};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::*;
use crate::options::CompileOptions;
use crate::shape::ArrayShape;

/// Environment variable naming the plugin `.so` to load.
pub const PLUGIN_ENV: &str = "TESSERA_PJRT_PLUGIN";

/// Where `scripts/install-pjrt.sh` puts the plugin, relative to the workspace.
pub const DEFAULT_PLUGIN_RELATIVE: &str = ".deps/pjrt/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";

/// A loaded PJRT plugin: the function table and where it came from.
pub struct Plugin {
    api: &'static PJRT_Api,
    path: PathBuf,
    version: (i32, i32),
    /// Whether the plugin takes `cpu_device_count` (its platform is `cpu`); learnt by the
    /// first [`Plugin::client`].
    takes_device_count: OnceLock<bool>,
}

// SAFETY: the PJRT C API is thread-safe; the table is immutable.
unsafe impl Send for Plugin {}
unsafe impl Sync for Plugin {}

fn loaded_plugins() -> &'static Mutex<HashMap<PathBuf, Arc<Plugin>>> {
    static PLUGINS: OnceLock<Mutex<HashMap<PathBuf, Arc<Plugin>>>> = OnceLock::new();
    PLUGINS.get_or_init(Default::default)
}

fn str_from_raw<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the C API hands out (pointer, length) pairs that are valid
        // for the lifetime of their owner, which the callers keep alive.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }
}

impl Plugin {
    /// `$TESSERA_PJRT_PLUGIN`, else the `.deps` install of the workspace.
    pub fn default_path() -> PathBuf {
        match std::env::var_os(PLUGIN_ENV) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(DEFAULT_PLUGIN_RELATIVE),
        }
    }

    /// Loads the plugin at [`Plugin::default_path`].
    pub fn load_default() -> Result<Arc<Plugin>> {
        Self::load(&Self::default_path())
    }

    /// Loads (once per canonical path) and initializes a plugin.
    pub fn load(path: &Path) -> Result<Arc<Plugin>> {
        let canonical = path.canonicalize().map_err(|_| Error::PluginNotFound {
            path: path.to_path_buf(),
        })?;
        let mut plugins = loaded_plugins().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = plugins.get(&canonical) {
            return Ok(p.clone());
        }
        let load_err = |message: String| Error::PluginLoad {
            path: canonical.clone(),
            message,
        };
        preload_nvidia_libraries(&canonical);
        // SAFETY: loading a shared object runs its initializers; the PJRT
        // plugin's are well behaved.
        let lib =
            unsafe { libloading::Library::new(&canonical) }.map_err(|e| load_err(e.to_string()))?;
        // The library stays loaded for the life of the process (see module doc).
        let lib: &'static libloading::Library = Box::leak(Box::new(lib));
        // SAFETY: `GetPjrtApi` has this signature in every PJRT plugin.
        let get_api: libloading::Symbol<'static, GetPjrtApiFn> =
            unsafe { lib.get(b"GetPjrtApi\0") }.map_err(|e| load_err(e.to_string()))?;
        // SAFETY: returns a pointer to a static table (or null).
        let api = unsafe { get_api() };
        if api.is_null() {
            return Err(load_err("GetPjrtApi returned null".into()));
        }
        // SAFETY: non-null, static for the process lifetime.
        let api: &'static PJRT_Api = unsafe { &*api };
        let version = (
            api.pjrt_api_version.major_version,
            api.pjrt_api_version.minor_version,
        );
        if version.0 != PJRT_API_MAJOR
            || version.1 < PJRT_API_MINOR
            || api.struct_size < PJRT_API_STRUCT_SIZE
        {
            return Err(Error::ApiVersion {
                path: canonical,
                major: version.0,
                minor: version.1,
                needed: PJRT_API_MINOR,
            });
        }
        let plugin = Arc::new(Plugin {
            api,
            path: canonical.clone(),
            version,
            takes_device_count: OnceLock::new(),
        });
        let mut args = PJRT_Plugin_Initialize_Args::new();
        plugin.call(
            "PJRT_Plugin_Initialize",
            api.PJRT_Plugin_Initialize,
            &mut args,
        )?;
        plugins.insert(canonical, plugin.clone());
        Ok(plugin)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(major, minor)` of the C API the plugin was built with.
    pub fn api_version(&self) -> (i32, i32) {
        self.version
    }

    /// Calls one table entry and turns a returned `PJRT_Error` into [`Error`].
    pub(crate) fn call<A>(&self, name: &'static str, f: Fallible<A>, args: &mut A) -> Result<()> {
        let f = f.ok_or(Error::MissingFunction(name))?;
        // SAFETY: `args` is a correctly laid out, initialized argument struct
        // for `f` (checked against the header by tests/abi.rs).
        let err = unsafe { f(args) };
        self.take_error(name, err)
    }

    /// Converts and frees a `PJRT_Error` (null = success).
    fn take_error(&self, call: &'static str, err: *mut PJRT_Error) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        let mut msg = PJRT_Error_Message_Args::new();
        msg.error = err;
        let message = match self.api.PJRT_Error_Message {
            Some(f) => {
                // SAFETY: valid error from the plugin.
                unsafe { f(&mut msg) };
                String::from_utf8_lossy(str_from_raw(msg.message, msg.message_size)).into_owned()
            }
            None => "<no PJRT_Error_Message>".to_string(),
        };
        let mut code_args = PJRT_Error_GetCode_Args::new();
        code_args.error = err;
        let code = match self.api.PJRT_Error_GetCode {
            // SAFETY: valid error from the plugin; the returned error (if
            // any) is about the GetCode call, and is freed below.
            Some(f) => {
                let e2 = unsafe { f(&mut code_args) };
                if e2.is_null() {
                    ErrorCode::from_raw(code_args.code)
                } else {
                    self.destroy_error(e2);
                    ErrorCode::Unknown
                }
            }
            None => ErrorCode::Unknown,
        };
        self.destroy_error(err);
        Err(Error::Pjrt {
            call,
            code,
            message,
        })
    }

    fn destroy_error(&self, err: *mut PJRT_Error) {
        if let Some(f) = self.api.PJRT_Error_Destroy {
            let mut args = PJRT_Error_Destroy_Args::new();
            args.error = err;
            // SAFETY: each error is destroyed exactly once.
            unsafe { f(&mut args) };
        }
    }

    /// A client with `num_devices` devices where the plugin lets the caller choose the count:
    /// a plugin whose platform is `cpu` gets `cpu_device_count = num_devices`; any other (the
    /// CUDA plugin refuses unknown options: "Unexpected option name passed to
    /// PJRT_Client_Create") is created without options and has the devices it finds. Which kind
    /// a plugin is, is learnt once, by creating its first client without options.
    pub fn client(self: &Arc<Self>, num_devices: usize) -> Result<Client> {
        let count = || {
            [(
                CPU_DEVICE_COUNT.to_string(),
                ClientOption::Int(num_devices as i64),
            )]
        };
        if let Some(&takes) = self.takes_device_count.get() {
            return if takes {
                self.client_with_options(&count())
            } else {
                self.client_with_options(&[])
            };
        }
        let probe = self.client_with_options(&[])?;
        let takes = probe.platform_name()? == "cpu";
        let _ = self.takes_device_count.set(takes);
        if takes && probe.devices().len() != num_devices {
            drop(probe);
            return self.client_with_options(&count());
        }
        Ok(probe)
    }

    /// A client created with the caller's options (`PJRT_Client_Create`'s named values, e.g.
    /// the CUDA plugin's `platform_name`, `allocator`, `memory_fraction`, `preallocate`,
    /// `visible_devices`). The plugin refuses options it does not know.
    pub fn client_with_options(
        self: &Arc<Self>,
        options: &[(String, ClientOption)],
    ) -> Result<Client> {
        // The named values point into `options`, which outlives the call.
        let named: Vec<PJRT_NamedValue> = options
            .iter()
            .map(|(name, value)| {
                let mut v = PJRT_NamedValue::new();
                v.name = name.as_ptr().cast();
                v.name_size = name.len();
                let (type_, value, size) = match value {
                    ClientOption::Int(i) => (
                        PJRT_NamedValue_kInt64,
                        PJRT_NamedValue_Value { int64_value: *i },
                        1,
                    ),
                    ClientOption::Ints(list) => (
                        PJRT_NamedValue_kInt64List,
                        PJRT_NamedValue_Value {
                            int64_array_value: list.as_ptr(),
                        },
                        list.len(),
                    ),
                    ClientOption::Float(f) => (
                        PJRT_NamedValue_kFloat,
                        PJRT_NamedValue_Value { float_value: *f },
                        1,
                    ),
                    ClientOption::Bool(b) => (
                        PJRT_NamedValue_kBool,
                        PJRT_NamedValue_Value { bool_value: *b },
                        1,
                    ),
                    ClientOption::Str(text) => (
                        PJRT_NamedValue_kString,
                        PJRT_NamedValue_Value {
                            string_value: text.as_ptr().cast(),
                        },
                        text.len(),
                    ),
                };
                v.type_ = type_;
                v.int64_value = value;
                v.value_size = size;
                v
            })
            .collect();
        let mut args = PJRT_Client_Create_Args::new();
        args.create_options = if named.is_empty() {
            ptr::null()
        } else {
            named.as_ptr()
        };
        args.num_options = named.len();
        self.call("PJRT_Client_Create", self.api.PJRT_Client_Create, &mut args)?;
        if args.client.is_null() {
            return Err(Error::InvalidArgument(
                "PJRT_Client_Create returned no client".into(),
            ));
        }
        let inner = Arc::new(ClientInner {
            plugin: self.clone(),
            raw: args.client,
        });
        let devices = inner.device_list(true)?;
        Ok(Client { inner, devices })
    }
}

/// The CPU plugin's create option for its number of devices.
pub const CPU_DEVICE_COUNT: &str = "cpu_device_count";

/// The value of one client create option (a `PJRT_NamedValue`).
#[derive(Clone, Debug, PartialEq)]
pub enum ClientOption {
    Int(i64),
    Ints(Vec<i64>),
    Float(f32),
    Bool(bool),
    Str(String),
}

/// NVIDIA libraries a GPU plugin needs, by the pip package that ships them (`nvidia-<name>`,
/// installed as `site-packages/nvidia/<dir>/lib/<file>`): what `pip install jax[cuda12]`
/// brings next to `jax_plugins/xla_cuda12/xla_cuda_plugin.so`.
const NVIDIA_LIBRARIES: [(&str, &[&str]); 10] = [
    ("cuda_runtime", &["libcudart.so.12"]),
    ("cuda_nvrtc", &["libnvrtc.so.12"]),
    ("cublas", &["libcublas.so.12", "libcublasLt.so.12"]),
    ("nccl", &["libnccl.so.2"]),
    ("cuda_cupti", &["libcupti.so.12"]),
    ("cusparse", &["libcusparse.so.12"]),
    ("cusolver", &["libcusolver.so.11"]),
    ("cufft", &["libcufft.so.11"]),
    ("nvshmem", &["libnvshmem_host.so.3"]),
    ("cudnn", &["libcudnn.so.9"]),
];

/// Loads the NVIDIA libraries of the Python environment a plugin was installed into, as jax
/// does before it loads its CUDA plugin: the plugin's own `dlopen`s of `libcudart.so.12`, ...
/// then find them already loaded, with no `LD_LIBRARY_PATH`. The environment is the
/// `site-packages` two levels above the plugin (`site-packages/jax_plugins/xla_cuda12/`);
/// libraries that are not there are left to the system's search path, as jax leaves them.
/// Nothing is loaded beside the CPU plugin, which has no `nvidia/` next to it.
fn preload_nvidia_libraries(plugin: &Path) {
    let Some(site) = plugin.parent().and_then(Path::parent) else {
        return;
    };
    let nvidia = site.join("nvidia");
    if !nvidia.is_dir() {
        return;
    }
    for (dir, files) in NVIDIA_LIBRARIES {
        for file in files {
            let path = nvidia.join(dir).join("lib").join(file);
            if !path.is_file() {
                continue;
            }
            // SAFETY: NVIDIA's libraries run only their own initializers on load. Loaded for
            // the life of the process, like the plugin; a library that fails to load is left
            // for the plugin's own search to report.
            if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
                std::mem::forget(lib);
            }
        }
    }
}

/// A PJRT event; [`Event::wait`] blocks and reports the event's error.
pub(crate) struct Event {
    plugin: Arc<Plugin>,
    raw: *mut PJRT_Event,
}

impl Event {
    pub(crate) fn new(plugin: &Arc<Plugin>, raw: *mut PJRT_Event) -> Option<Self> {
        (!raw.is_null()).then(|| Event {
            plugin: plugin.clone(),
            raw,
        })
    }

    /// Waits for the event and returns its error, whether or not it was
    /// already complete.
    pub(crate) fn wait(self, call: &'static str) -> Result<()> {
        let mut args = PJRT_Event_Await_Args::new();
        args.event = self.raw;
        let f = self
            .plugin
            .api
            .PJRT_Event_Await
            .ok_or(Error::MissingFunction("PJRT_Event_Await"))?;
        // SAFETY: live event.
        let err = unsafe { f(&mut args) };
        self.plugin.take_error(call, err)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let mut args = PJRT_Event_Destroy_Args::new();
        args.event = self.raw;
        // Nothing useful can be done with a failure to free.
        let _ = self.plugin.call(
            "PJRT_Event_Destroy",
            self.plugin.api.PJRT_Event_Destroy,
            &mut args,
        );
    }
}

pub(crate) struct ClientInner {
    plugin: Arc<Plugin>,
    raw: *mut PJRT_Client,
}

// SAFETY: PJRT clients are thread-safe.
unsafe impl Send for ClientInner {}
unsafe impl Sync for ClientInner {}

impl Drop for ClientInner {
    fn drop(&mut self) {
        let mut args = PJRT_Client_Destroy_Args::new();
        args.client = self.raw;
        let _ = self.plugin.call(
            "PJRT_Client_Destroy",
            self.plugin.api.PJRT_Client_Destroy,
            &mut args,
        );
    }
}

impl ClientInner {
    fn api(&self) -> &'static PJRT_Api {
        self.plugin.api
    }

    fn device_list(self: &Arc<Self>, addressable: bool) -> Result<Vec<Device>> {
        let (ptr, n) = if addressable {
            let mut a = PJRT_Client_AddressableDevices_Args::new();
            a.client = self.raw;
            self.plugin.call(
                "PJRT_Client_AddressableDevices",
                self.api().PJRT_Client_AddressableDevices,
                &mut a,
            )?;
            (a.addressable_devices, a.num_addressable_devices)
        } else {
            let mut a = PJRT_Client_Devices_Args::new();
            a.client = self.raw;
            self.plugin.call(
                "PJRT_Client_Devices",
                self.api().PJRT_Client_Devices,
                &mut a,
            )?;
            (a.devices, a.num_devices)
        };
        let raws: Vec<*mut PJRT_Device> = if ptr.is_null() || n == 0 {
            Vec::new()
        } else {
            // SAFETY: array of `n` device pointers owned by the client.
            unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
        };
        raws.into_iter().map(|raw| self.device(raw)).collect()
    }

    fn device(self: &Arc<Self>, raw: *mut PJRT_Device) -> Result<Device> {
        let mut d = PJRT_Device_GetDescription_Args::new();
        d.device = raw;
        self.plugin.call(
            "PJRT_Device_GetDescription",
            self.api().PJRT_Device_GetDescription,
            &mut d,
        )?;
        let mut id = PJRT_DeviceDescription_Id_Args::new();
        id.device_description = d.device_description;
        self.plugin.call(
            "PJRT_DeviceDescription_Id",
            self.api().PJRT_DeviceDescription_Id,
            &mut id,
        )?;
        let mut kind = PJRT_DeviceDescription_Kind_Args::new();
        kind.device_description = d.device_description;
        self.plugin.call(
            "PJRT_DeviceDescription_Kind",
            self.api().PJRT_DeviceDescription_Kind,
            &mut kind,
        )?;
        let mut hw = PJRT_Device_LocalHardwareId_Args::new();
        hw.device = raw;
        self.plugin.call(
            "PJRT_Device_LocalHardwareId",
            self.api().PJRT_Device_LocalHardwareId,
            &mut hw,
        )?;
        Ok(Device {
            raw,
            owner: self.raw as usize,
            id: id.id,
            local_hardware_id: hw.local_hardware_id,
            kind: String::from_utf8_lossy(str_from_raw(kind.device_kind, kind.device_kind_size))
                .into_owned(),
        })
    }

    fn buffer(self: &Arc<Self>, raw: *mut PJRT_Buffer) -> Buffer {
        Buffer {
            client: self.clone(),
            raw,
        }
    }
}

/// A device of a client. Cheap to clone; valid while its client lives (the
/// raw pointer is only dereferenced by calls that hold the client).
#[derive(Clone, Debug)]
pub struct Device {
    raw: *mut PJRT_Device,
    /// Address of the owning `PJRT_Client`, to refuse devices of another client.
    owner: usize,
    id: i32,
    local_hardware_id: i32,
    kind: String,
}

// SAFETY: a device pointer is an immutable identity owned by the client.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// Global device id (what device assignments refer to).
    pub fn id(&self) -> i32 {
        self.id
    }
    pub fn local_hardware_id(&self) -> i32 {
        self.local_hardware_id
    }
    pub fn kind(&self) -> &str {
        &self.kind
    }
}

/// A program for `PJRT_Client_Compile`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Program {
    /// Serialized `xla.HloModuleProto` (format `"hlo"`).
    HloProto(Vec<u8>),
    /// StableHLO text or bytecode with a `@main` function (format `"mlir"`).
    Mlir(Vec<u8>),
}

impl Program {
    pub fn mlir(text: impl Into<String>) -> Self {
        Program::Mlir(text.into().into_bytes())
    }
    pub fn format(&self) -> &'static str {
        match self {
            Program::HloProto(_) => "hlo",
            Program::Mlir(_) => "mlir",
        }
    }
    pub fn code(&self) -> &[u8] {
        match self {
            Program::HloProto(b) | Program::Mlir(b) => b,
        }
    }
}

/// A PJRT client and its addressable devices.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
    devices: Vec<Device>,
}

impl Client {
    /// Loads the default plugin and creates a client with `num_devices` CPU
    /// devices.
    pub fn cpu(num_devices: usize) -> Result<Client> {
        Plugin::load_default()?.client(num_devices)
    }

    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.inner.plugin
    }

    pub fn platform_name(&self) -> Result<String> {
        let mut a = PJRT_Client_PlatformName_Args::new();
        a.client = self.inner.raw;
        self.inner.plugin.call(
            "PJRT_Client_PlatformName",
            self.inner.api().PJRT_Client_PlatformName,
            &mut a,
        )?;
        Ok(
            String::from_utf8_lossy(str_from_raw(a.platform_name, a.platform_name_size))
                .into_owned(),
        )
    }

    pub fn platform_version(&self) -> Result<String> {
        let mut a = PJRT_Client_PlatformVersion_Args::new();
        a.client = self.inner.raw;
        self.inner.plugin.call(
            "PJRT_Client_PlatformVersion",
            self.inner.api().PJRT_Client_PlatformVersion,
            &mut a,
        )?;
        Ok(
            String::from_utf8_lossy(str_from_raw(a.platform_version, a.platform_version_size))
                .into_owned(),
        )
    }

    /// Addressable devices, in the client's order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// All devices, addressable or not.
    pub fn all_devices(&self) -> Result<Vec<Device>> {
        self.inner.device_list(false)
    }

    /// The addressable device with global id `id`.
    pub fn device_by_id(&self, id: i64) -> Result<&Device> {
        self.devices
            .iter()
            .find(|d| i64::from(d.id) == id)
            .ok_or_else(|| Error::InvalidArgument(format!("no addressable device with id {id}")))
    }

    /// The plugin's default assignment, `[replica][partition]` of device ids.
    pub fn default_device_assignment(
        &self,
        replicas: usize,
        partitions: usize,
    ) -> Result<Vec<Vec<i64>>> {
        let n = replicas
            .checked_mul(partitions)
            .ok_or_else(|| Error::InvalidArgument("replicas * partitions overflows".into()))?;
        let mut out = vec![0 as std::ffi::c_int; n];
        let mut a = PJRT_Client_DefaultDeviceAssignment_Args::new();
        a.client = self.inner.raw;
        a.num_replicas = replicas as i32;
        a.num_partitions = partitions as i32;
        a.default_assignment_size = n;
        a.default_assignment = out.as_mut_ptr();
        self.inner.plugin.call(
            "PJRT_Client_DefaultDeviceAssignment",
            self.inner.api().PJRT_Client_DefaultDeviceAssignment,
            &mut a,
        )?;
        Ok(out
            .chunks(partitions.max(1))
            .map(|row| row.iter().map(|&d| i64::from(d)).collect())
            .collect())
    }

    /// Compiles `program` with `options`.
    pub fn compile(&self, program: &Program, options: &CompileOptions) -> Result<LoadedExecutable> {
        let opts = options.encode()?;
        let format = program.format();
        let code = program.code();
        let mut prog = PJRT_Program::new();
        // The API takes `char*` but does not write through it when compiling.
        prog.code = code.as_ptr() as *mut c_char;
        prog.code_size = code.len();
        prog.format = format.as_ptr().cast();
        prog.format_size = format.len();
        let mut a = PJRT_Client_Compile_Args::new();
        a.client = self.inner.raw;
        a.program = &prog;
        a.compile_options = opts.as_ptr().cast();
        a.compile_options_size = opts.len();
        self.inner.plugin.call(
            "PJRT_Client_Compile",
            self.inner.api().PJRT_Client_Compile,
            &mut a,
        )?;
        LoadedExecutable::new(self, a.executable)
    }

    /// Copies a host array to `device`; waits until the copy is complete.
    pub fn buffer_from_host<T: NativeType>(
        &self,
        data: &[T],
        dims: &[i64],
        device: &Device,
    ) -> Result<Buffer> {
        // SAFETY: NativeType guarantees plain data without padding.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        self.buffer_from_host_bytes(T::TYPE, bytes, dims, device)
    }

    /// Copies a dense row-major host array, given as bytes, to `device`.
    pub fn buffer_from_host_bytes(
        &self,
        element_type: ElementType,
        bytes: &[u8],
        dims: &[i64],
        device: &Device,
    ) -> Result<Buffer> {
        let shape = ArrayShape::new(element_type, dims);
        let expected = shape
            .byte_size()
            .ok_or_else(|| Error::InvalidArgument(format!("invalid dimensions {shape}")))?;
        if expected != bytes.len() as u64 {
            return Err(Error::InvalidArgument(format!(
                "{shape} needs {expected} bytes, got {}",
                bytes.len()
            )));
        }
        if device.owner != self.inner.raw as usize {
            return Err(Error::InvalidArgument(format!(
                "device {} belongs to another client",
                device.id
            )));
        }
        let mut a = PJRT_Client_BufferFromHostBuffer_Args::new();
        a.client = self.inner.raw;
        a.data = bytes.as_ptr().cast();
        a.type_ = element_type.to_raw();
        a.dims = dims.as_ptr();
        a.num_dims = dims.len();
        a.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
        a.device = device.raw;
        self.inner.plugin.call(
            "PJRT_Client_BufferFromHostBuffer",
            self.inner.api().PJRT_Client_BufferFromHostBuffer,
            &mut a,
        )?;
        let buffer = (!a.buffer.is_null()).then(|| self.inner.buffer(a.buffer));
        // `bytes` must stay untouched until the plugin is done with them: wait
        // here, before returning the borrow.
        if let Some(ev) = Event::new(&self.inner.plugin, a.done_with_host_buffer) {
            ev.wait("PJRT_Client_BufferFromHostBuffer (done_with_host_buffer)")?;
        }
        let buffer = buffer.ok_or_else(|| {
            Error::InvalidArgument("PJRT_Client_BufferFromHostBuffer returned no buffer".into())
        })?;
        buffer.ready()?;
        Ok(buffer)
    }
}

/// A device array owned by this process. Dropping it frees the device memory.
pub struct Buffer {
    client: Arc<ClientInner>,
    raw: *mut PJRT_Buffer,
}

// SAFETY: PJRT buffers are thread-safe handles.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Drop for Buffer {
    fn drop(&mut self) {
        let mut a = PJRT_Buffer_Destroy_Args::new();
        a.buffer = self.raw;
        let _ = self.client.plugin.call(
            "PJRT_Buffer_Destroy",
            self.client.api().PJRT_Buffer_Destroy,
            &mut a,
        );
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.shape() {
            Ok(s) => write!(f, "Buffer({s})"),
            Err(_) => write!(f, "Buffer(?)"),
        }
    }
}

impl Buffer {
    fn plugin(&self) -> &Arc<Plugin> {
        &self.client.plugin
    }

    pub fn element_type(&self) -> Result<ElementType> {
        let mut a = PJRT_Buffer_ElementType_Args::new();
        a.buffer = self.raw;
        self.plugin().call(
            "PJRT_Buffer_ElementType",
            self.client.api().PJRT_Buffer_ElementType,
            &mut a,
        )?;
        ElementType::from_raw(a.type_)
            .ok_or_else(|| Error::UnsupportedType(format!("PJRT_Buffer_Type {}", a.type_)))
    }

    pub fn dims(&self) -> Result<Vec<i64>> {
        let mut a = PJRT_Buffer_Dimensions_Args::new();
        a.buffer = self.raw;
        self.plugin().call(
            "PJRT_Buffer_Dimensions",
            self.client.api().PJRT_Buffer_Dimensions,
            &mut a,
        )?;
        if a.dims.is_null() || a.num_dims == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: `num_dims` values owned by the buffer.
        Ok(unsafe { std::slice::from_raw_parts(a.dims, a.num_dims) }.to_vec())
    }

    pub fn shape(&self) -> Result<ArrayShape> {
        Ok(ArrayShape::new(self.element_type()?, self.dims()?))
    }

    pub fn on_device_size(&self) -> Result<usize> {
        let mut a = PJRT_Buffer_OnDeviceSizeInBytes_Args::new();
        a.buffer = self.raw;
        self.plugin().call(
            "PJRT_Buffer_OnDeviceSizeInBytes",
            self.client.api().PJRT_Buffer_OnDeviceSizeInBytes,
            &mut a,
        )?;
        Ok(a.on_device_size_in_bytes)
    }

    /// Global id of the device holding the buffer.
    pub fn device_id(&self) -> Result<i32> {
        let mut a = PJRT_Buffer_Device_Args::new();
        a.buffer = self.raw;
        self.plugin().call(
            "PJRT_Buffer_Device",
            self.client.api().PJRT_Buffer_Device,
            &mut a,
        )?;
        Ok(self.client.device(a.device)?.id)
    }

    /// True once the buffer was deleted or donated to an execution.
    pub fn is_deleted(&self) -> Result<bool> {
        let mut a = PJRT_Buffer_IsDeleted_Args::new();
        a.buffer = self.raw;
        self.plugin().call(
            "PJRT_Buffer_IsDeleted",
            self.client.api().PJRT_Buffer_IsDeleted,
            &mut a,
        )?;
        Ok(a.is_deleted)
    }

    /// Waits until the buffer's contents are computed; reports a failed
    /// producer (e.g. an execution that failed at run time).
    pub fn ready(&self) -> Result<()> {
        let mut a = PJRT_Buffer_ReadyEvent_Args::new();
        a.buffer = self.raw;
        self.plugin().call(
            "PJRT_Buffer_ReadyEvent",
            self.client.api().PJRT_Buffer_ReadyEvent,
            &mut a,
        )?;
        match Event::new(self.plugin(), a.event) {
            Some(ev) => ev.wait("PJRT_Buffer_ReadyEvent"),
            None => Ok(()),
        }
    }

    /// Copies the array to the host in dense row-major layout.
    pub fn to_host_bytes(&self) -> Result<Vec<u8>> {
        // The dense size follows from the shape; asking the plugin for it
        // would cost a second call and event.
        let shape = self.shape()?;
        let size = shape
            .byte_size()
            .ok_or_else(|| Error::InvalidArgument(format!("invalid buffer shape {shape}")))?;
        let mut out = vec![0u8; size as usize];
        let mut a = PJRT_Buffer_ToHostBuffer_Args::new();
        a.src = self.raw;
        a.dst = out.as_mut_ptr().cast();
        a.dst_size = out.len();
        self.plugin().call(
            "PJRT_Buffer_ToHostBuffer",
            self.client.api().PJRT_Buffer_ToHostBuffer,
            &mut a,
        )?;
        match Event::new(self.plugin(), a.event) {
            Some(ev) => ev.wait("PJRT_Buffer_ToHostBuffer")?,
            None => self.ready()?,
        }
        Ok(out)
    }

    /// Copies the array to the host as `T`s; `T` must match the element type.
    pub fn to_vec<T: NativeType>(&self) -> Result<Vec<T>> {
        let ty = self.element_type()?;
        if ty != T::TYPE {
            return Err(Error::ShapeMismatch(format!(
                "buffer holds {ty}, asked for {}",
                T::TYPE
            )));
        }
        let bytes = self.to_host_bytes()?;
        Ok(bytes_to_vec(&bytes))
    }
}

/// Reinterprets dense bytes as `T`s (copying, so alignment does not matter).
pub(crate) fn bytes_to_vec<T: NativeType>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / std::mem::size_of::<T>();
    let mut out = Vec::<T>::with_capacity(n);
    // SAFETY: NativeType is plain data valid for the device's bit patterns;
    // exactly `n` elements are written before `set_len`.
    unsafe {
        ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            out.as_mut_ptr().cast::<u8>(),
            n * std::mem::size_of::<T>(),
        );
        out.set_len(n);
    }
    out
}

/// Per-call execution options.
#[derive(Clone, Debug, Default)]
pub struct ExecuteOptions {
    /// Parameters whose buffers must not be donated even if the program
    /// aliases them to an output (the plugin copies instead).
    pub non_donatable_input_indices: Vec<i64>,
    /// Identifies a multi-device launch (0 = unset).
    pub launch_id: i32,
}

/// A compiled program, loaded on its devices.
pub struct LoadedExecutable {
    client: Client,
    raw: *mut PJRT_LoadedExecutable,
    exe: *mut PJRT_Executable,
    devices: Vec<Device>,
    num_outputs: usize,
    num_replicas: usize,
    num_partitions: usize,
}

// SAFETY: PJRT executables are thread-safe.
unsafe impl Send for LoadedExecutable {}
unsafe impl Sync for LoadedExecutable {}

impl Drop for LoadedExecutable {
    fn drop(&mut self) {
        let plugin = &self.client.inner.plugin;
        if !self.exe.is_null() {
            let mut a = PJRT_Executable_Destroy_Args::new();
            a.executable = self.exe;
            let _ = plugin.call(
                "PJRT_Executable_Destroy",
                plugin.api.PJRT_Executable_Destroy,
                &mut a,
            );
        }
        let mut a = PJRT_LoadedExecutable_Destroy_Args::new();
        a.executable = self.raw;
        let _ = plugin.call(
            "PJRT_LoadedExecutable_Destroy",
            plugin.api.PJRT_LoadedExecutable_Destroy,
            &mut a,
        );
    }
}

impl std::fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedExecutable")
            .field(
                "devices",
                &self.devices.iter().map(Device::id).collect::<Vec<_>>(),
            )
            .field("num_outputs", &self.num_outputs)
            .finish()
    }
}

impl LoadedExecutable {
    fn new(client: &Client, raw: *mut PJRT_LoadedExecutable) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::InvalidArgument(
                "PJRT_Client_Compile returned no executable".into(),
            ));
        }
        let plugin = client.plugin().clone();
        let api = plugin.api;
        // Own `raw` right away so that it is destroyed on every error path.
        let mut this = LoadedExecutable {
            client: client.clone(),
            raw,
            exe: ptr::null_mut(),
            devices: Vec::new(),
            num_outputs: 0,
            num_replicas: 0,
            num_partitions: 0,
        };
        let mut g = PJRT_LoadedExecutable_GetExecutable_Args::new();
        g.loaded_executable = raw;
        plugin.call(
            "PJRT_LoadedExecutable_GetExecutable",
            api.PJRT_LoadedExecutable_GetExecutable,
            &mut g,
        )?;
        this.exe = g.executable;
        let mut d = PJRT_LoadedExecutable_AddressableDevices_Args::new();
        d.executable = raw;
        plugin.call(
            "PJRT_LoadedExecutable_AddressableDevices",
            api.PJRT_LoadedExecutable_AddressableDevices,
            &mut d,
        )?;
        if !d.addressable_devices.is_null() {
            // SAFETY: array owned by the executable.
            let raws = unsafe {
                std::slice::from_raw_parts(d.addressable_devices, d.num_addressable_devices)
            };
            for &r in raws {
                this.devices.push(client.inner.device(r)?);
            }
        }
        let mut o = PJRT_Executable_NumOutputs_Args::new();
        o.executable = this.exe;
        plugin.call(
            "PJRT_Executable_NumOutputs",
            api.PJRT_Executable_NumOutputs,
            &mut o,
        )?;
        this.num_outputs = o.num_outputs;
        let mut r = PJRT_Executable_NumReplicas_Args::new();
        r.executable = this.exe;
        plugin.call(
            "PJRT_Executable_NumReplicas",
            api.PJRT_Executable_NumReplicas,
            &mut r,
        )?;
        this.num_replicas = r.num_replicas;
        let mut p = PJRT_Executable_NumPartitions_Args::new();
        p.executable = this.exe;
        plugin.call(
            "PJRT_Executable_NumPartitions",
            api.PJRT_Executable_NumPartitions,
            &mut p,
        )?;
        this.num_partitions = p.num_partitions;
        Ok(this)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Devices of one launch; argument list `k` goes to `devices()[k]`.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }
    pub fn num_outputs(&self) -> usize {
        self.num_outputs
    }
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }
    pub fn num_partitions(&self) -> usize {
        self.num_partitions
    }

    /// Shapes of the per-device outputs.
    pub fn output_shapes(&self) -> Result<Vec<ArrayShape>> {
        let plugin = &self.client.inner.plugin;
        let mut t = PJRT_Executable_OutputElementTypes_Args::new();
        t.executable = self.exe;
        plugin.call(
            "PJRT_Executable_OutputElementTypes",
            plugin.api.PJRT_Executable_OutputElementTypes,
            &mut t,
        )?;
        let mut d = PJRT_Executable_OutputDimensions_Args::new();
        d.executable = self.exe;
        plugin.call(
            "PJRT_Executable_OutputDimensions",
            plugin.api.PJRT_Executable_OutputDimensions,
            &mut d,
        )?;
        if t.num_output_types != d.num_outputs {
            return Err(Error::InvalidArgument(format!(
                "plugin reports {} output types but {} output dimension lists",
                t.num_output_types, d.num_outputs
            )));
        }
        let n = d.num_outputs;
        if n == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: arrays owned by the executable, lengths as documented.
        let types = unsafe { std::slice::from_raw_parts(t.output_types, n) };
        let sizes = unsafe { std::slice::from_raw_parts(d.dim_sizes, n) };
        let total: usize = sizes.iter().sum();
        let dims: &[i64] = if total == 0 {
            &[]
        } else {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(d.dims, total) }
        };
        let mut out = Vec::with_capacity(n);
        let mut at = 0;
        for (&ty, &len) in types.iter().zip(sizes) {
            let et = ElementType::from_raw(ty)
                .ok_or_else(|| Error::UnsupportedType(format!("PJRT_Buffer_Type {ty}")))?;
            out.push(ArrayShape::new(et, &dims[at..at + len]));
            at += len;
        }
        Ok(out)
    }

    /// Runs on every device of the executable: `args[k]` is the argument list
    /// of `devices()[k]`. Returns the outputs per device, after waiting for
    /// every device and checking every completion event.
    pub fn execute(
        &self,
        args: &[Vec<&Buffer>],
        options: &ExecuteOptions,
    ) -> Result<Vec<Vec<Buffer>>> {
        let n_dev = self.devices.len();
        if args.len() != n_dev {
            return Err(Error::InvalidArgument(format!(
                "executable runs on {n_dev} devices, got {} argument lists",
                args.len()
            )));
        }
        let num_args = args.first().map_or(0, Vec::len);
        if let Some((k, l)) = args.iter().enumerate().find(|(_, l)| l.len() != num_args) {
            return Err(Error::InvalidArgument(format!(
                "argument list {k} has {} arguments, list 0 has {num_args}",
                l.len()
            )));
        }
        if let Some((k, i)) = args.iter().enumerate().find_map(|(k, l)| {
            l.iter()
                .position(|b| !Arc::ptr_eq(&b.client, &self.client.inner))
                .map(|i| (k, i))
        }) {
            return Err(Error::InvalidArgument(format!(
                "argument {i} of list {k} belongs to another client"
            )));
        }
        let raw_args: Vec<Vec<*mut PJRT_Buffer>> = args
            .iter()
            .map(|l| l.iter().map(|b| b.raw).collect())
            .collect();
        let arg_ptrs: Vec<*const *mut PJRT_Buffer> = raw_args.iter().map(|l| l.as_ptr()).collect();
        let mut outputs: Vec<Vec<*mut PJRT_Buffer>> = (0..n_dev)
            .map(|_| vec![ptr::null_mut(); self.num_outputs])
            .collect();
        let out_ptrs: Vec<*mut *mut PJRT_Buffer> =
            outputs.iter_mut().map(|l| l.as_mut_ptr()).collect();
        let mut events: Vec<*mut PJRT_Event> = vec![ptr::null_mut(); n_dev];

        let mut opts = PJRT_ExecuteOptions::new();
        opts.launch_id = options.launch_id;
        opts.non_donatable_input_indices = options.non_donatable_input_indices.as_ptr();
        opts.num_non_donatable_input_indices = options.non_donatable_input_indices.len();

        let mut a = PJRT_LoadedExecutable_Execute_Args::new();
        a.executable = self.raw;
        a.options = &mut opts;
        a.argument_lists = arg_ptrs.as_ptr();
        a.num_devices = n_dev;
        a.num_args = num_args;
        a.output_lists = out_ptrs.as_ptr();
        a.device_complete_events = events.as_mut_ptr();
        let plugin = self.client.plugin().clone();
        plugin.call(
            "PJRT_LoadedExecutable_Execute",
            plugin.api.PJRT_LoadedExecutable_Execute,
            &mut a,
        )?;
        // Take ownership of everything the call produced before checking
        // anything, so nothing leaks on an error path.
        let results: Vec<Vec<Buffer>> = outputs
            .iter()
            .map(|l| {
                l.iter()
                    .filter(|p| !p.is_null())
                    .map(|&p| self.client.inner.buffer(p))
                    .collect()
            })
            .collect();
        let events: Vec<Event> = events
            .into_iter()
            .filter_map(|e| Event::new(&plugin, e))
            .collect();
        let mut first_err = None;
        for ev in events {
            if let Err(e) = ev.wait("PJRT_LoadedExecutable_Execute (device completion)") {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        for (k, l) in results.iter().enumerate() {
            if l.len() != self.num_outputs {
                return Err(Error::InvalidArgument(format!(
                    "device {k} produced {} of {} outputs",
                    l.len(),
                    self.num_outputs
                )));
            }
            for b in l {
                b.ready()?;
            }
        }
        Ok(results)
    }
}

/// Reads a NUL-free C string (for diagnostics only).
#[allow(dead_code)]
pub(crate) fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
