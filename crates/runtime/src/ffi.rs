//! Hand-written declarations of the parts of the PJRT C API (`pjrt_c_api.h`,
//! version 0.81) that this crate calls.
//!
//! Names follow the header exactly so that every declaration can be checked
//! against it: the test `tests/abi.rs` compiles a small C program against the
//! plugin's own header and compares every `*_STRUCT_SIZE`, every field offset
//! of every argument struct declared here, and every function-table slot
//! offset of `PJRT_Api` with the values in [`ARGS_LAYOUT`] and
//! [`API_LAYOUT`].
//!
//! The header's `struct_size` is *not* `sizeof`: it is the offset of the last
//! field plus that field's size (`PJRT_STRUCT_SIZE`), which differs when the
//! struct ends with padding (e.g. a trailing `bool`). Every argument struct
//! here gets a `STRUCT_SIZE` constant computed that way, and `new()` returns a
//! zeroed value with `struct_size` already set.
//!
//! Unused function-table slots are typed [`Unused`]; their position matters,
//! their signature does not.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code
)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

pub const PJRT_API_MAJOR: i32 = 0;
pub const PJRT_API_MINOR: i32 = 81;

/// Opaque handle types of the C API.
macro_rules! opaque {
    ($($name:ident),* $(,)?) => {
        $(
            #[repr(C)]
            pub struct $name {
                _private: [u8; 0],
            }
        )*
    };
}

opaque!(
    PJRT_Error,
    PJRT_Event,
    PJRT_Client,
    PJRT_Device,
    PJRT_DeviceDescription,
    PJRT_Memory,
    PJRT_Executable,
    PJRT_LoadedExecutable,
    PJRT_Buffer,
    PJRT_ExecuteContext,
    PJRT_SendCallbackInfo,
    PJRT_RecvCallbackInfo,
);

/// `PJRT_Extension_Base`; we never walk extension chains, only pass null.
#[repr(C)]
pub struct PJRT_Extension_Base {
    pub struct_size: usize,
    pub type_: c_int,
    pub next: *mut PJRT_Extension_Base,
}

/// A C enum is an `int` on every ABI this crate targets.
pub type PJRT_Error_Code = c_int;
pub type PJRT_Buffer_Type = c_int;
pub type PJRT_NamedValue_Type = c_int;
pub type PJRT_HostBufferSemantics = c_int;

pub const PJRT_NamedValue_kString: PJRT_NamedValue_Type = 0;
pub const PJRT_NamedValue_kInt64: PJRT_NamedValue_Type = 1;
pub const PJRT_NamedValue_kInt64List: PJRT_NamedValue_Type = 2;
pub const PJRT_NamedValue_kFloat: PJRT_NamedValue_Type = 3;
pub const PJRT_NamedValue_kBool: PJRT_NamedValue_Type = 4;

pub const PJRT_HostBufferSemantics_kImmutableOnlyDuringCall: PJRT_HostBufferSemantics = 0;
pub const PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes: PJRT_HostBufferSemantics = 1;

/// The anonymous union inside `PJRT_NamedValue`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_NamedValue_Value {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

/// Every declared struct and, for each, the offset of each field, so the ABI
/// test can compare them with the C compiler's view of the header.
pub struct StructLayout {
    pub name: &'static str,
    /// `PJRT_STRUCT_SIZE(name, last_field)` as this crate computes it.
    pub struct_size: usize,
    pub fields: &'static [(&'static str, usize)],
}

/// Declares a C argument struct. The fields after the `;` is the last field,
/// the one `PJRT_DEFINE_STRUCT_TRAITS` names in the header.
macro_rules! c_struct {
    ($name:ident { $($f:ident : $t:ty,)* ; $lf:ident : $lt:ty }) => {
        #[repr(C)]
        pub struct $name {
            $(pub $f: $t,)*
            pub $lf: $lt,
        }

        impl $name {
            pub const STRUCT_SIZE: usize = offset_of!($name, $lf) + size_of::<$lt>();

            /// A zeroed value with `struct_size` set; every field of these
            /// structs (pointers, integers, bools, C enums, optional function
            /// pointers) has zero as a valid value.
            #[allow(clippy::new_without_default)]
            pub fn new() -> Self {
                // SAFETY: see above; all fields accept the all-zero pattern.
                let mut v: Self = unsafe { std::mem::zeroed() };
                set_struct_size(&mut v, Self::STRUCT_SIZE);
                v
            }

            pub const LAYOUT: StructLayout = StructLayout {
                name: stringify!($name),
                struct_size: Self::STRUCT_SIZE,
                fields: &[
                    $((stringify!($f), offset_of!($name, $f)),)*
                    (stringify!($lf), offset_of!($name, $lf)),
                ],
            };
        }
    };
}

/// Writes the leading `size_t struct_size` of a C argument struct. Every
/// struct declared with `c_struct!` except `PJRT_Chunk`-like ones starts with it.
fn set_struct_size<T>(v: &mut T, size: usize) {
    if size_of::<T>() >= size_of::<usize>() {
        // SAFETY: `T` is `repr(C)` and, for all structs that call this, its
        // first field is a `usize`.
        unsafe { (v as *mut T).cast::<usize>().write(size) };
    }
}

type Ext = *mut PJRT_Extension_Base;

c_struct!(PJRT_Api_Version { struct_size: usize, extension_start: Ext, major_version: c_int, ; minor_version: c_int });
c_struct!(PJRT_Error_Destroy_Args { struct_size: usize, extension_start: Ext, ; error: *mut PJRT_Error });
c_struct!(PJRT_Error_Message_Args { struct_size: usize, extension_start: Ext, error: *const PJRT_Error, message: *const c_char, ; message_size: usize });
c_struct!(PJRT_Error_GetCode_Args { struct_size: usize, extension_start: Ext, error: *const PJRT_Error, ; code: PJRT_Error_Code });
c_struct!(PJRT_NamedValue {
    struct_size: usize, extension_start: Ext, name: *const c_char, name_size: usize,
    type_: PJRT_NamedValue_Type, int64_value: PJRT_NamedValue_Value, ; value_size: usize
});
c_struct!(PJRT_Plugin_Initialize_Args { struct_size: usize, ; extension_start: Ext });
c_struct!(PJRT_Plugin_Attributes_Args { struct_size: usize, extension_start: Ext, attributes: *const PJRT_NamedValue, ; num_attributes: usize });

c_struct!(PJRT_Event_Destroy_Args { struct_size: usize, extension_start: Ext, ; event: *mut PJRT_Event });
c_struct!(PJRT_Event_IsReady_Args { struct_size: usize, extension_start: Ext, event: *mut PJRT_Event, ; is_ready: bool });
c_struct!(PJRT_Event_Error_Args { struct_size: usize, extension_start: Ext, ; event: *mut PJRT_Event });
c_struct!(PJRT_Event_Await_Args { struct_size: usize, extension_start: Ext, ; event: *mut PJRT_Event });

c_struct!(PJRT_Client_Create_Args {
    struct_size: usize, extension_start: Ext, create_options: *const PJRT_NamedValue, num_options: usize,
    kv_get_callback: *mut c_void, kv_get_user_arg: *mut c_void, kv_put_callback: *mut c_void,
    kv_put_user_arg: *mut c_void, client: *mut PJRT_Client, kv_try_get_callback: *mut c_void,
    ; kv_try_get_user_arg: *mut c_void
});
c_struct!(PJRT_Client_Destroy_Args { struct_size: usize, extension_start: Ext, ; client: *mut PJRT_Client });
c_struct!(PJRT_Client_PlatformName_Args {
    struct_size: usize, extension_start: Ext, client: *mut PJRT_Client, platform_name: *const c_char,
    ; platform_name_size: usize
});
c_struct!(PJRT_Client_PlatformVersion_Args {
    struct_size: usize, extension_start: Ext, client: *mut PJRT_Client, platform_version: *const c_char,
    ; platform_version_size: usize
});
c_struct!(PJRT_Client_Devices_Args {
    struct_size: usize, extension_start: Ext, client: *mut PJRT_Client, devices: *const *mut PJRT_Device,
    ; num_devices: usize
});
c_struct!(PJRT_Client_AddressableDevices_Args {
    struct_size: usize, extension_start: Ext, client: *mut PJRT_Client,
    addressable_devices: *const *mut PJRT_Device, ; num_addressable_devices: usize
});
c_struct!(PJRT_Program {
    struct_size: usize, extension_start: Ext, code: *mut c_char, code_size: usize, format: *const c_char,
    ; format_size: usize
});
c_struct!(PJRT_Client_Compile_Args {
    struct_size: usize, extension_start: Ext, client: *mut PJRT_Client, program: *const PJRT_Program,
    compile_options: *const c_char, compile_options_size: usize, ; executable: *mut PJRT_LoadedExecutable
});
c_struct!(PJRT_Client_DefaultDeviceAssignment_Args {
    struct_size: usize, extension_start: Ext, client: *mut PJRT_Client, num_replicas: c_int,
    num_partitions: c_int, default_assignment_size: usize, ; default_assignment: *mut c_int
});
c_struct!(PJRT_Client_BufferFromHostBuffer_Args {
    struct_size: usize, extension_start: Ext, client: *mut PJRT_Client, data: *const c_void,
    type_: PJRT_Buffer_Type, dims: *const i64, num_dims: usize, byte_strides: *const i64,
    num_byte_strides: usize, host_buffer_semantics: PJRT_HostBufferSemantics, device: *mut PJRT_Device,
    memory: *mut PJRT_Memory, device_layout: *mut c_void, done_with_host_buffer: *mut PJRT_Event,
    ; buffer: *mut PJRT_Buffer
});

c_struct!(PJRT_DeviceDescription_Id_Args {
    struct_size: usize, extension_start: Ext, device_description: *mut PJRT_DeviceDescription, ; id: c_int
});
c_struct!(PJRT_DeviceDescription_Kind_Args {
    struct_size: usize, extension_start: Ext, device_description: *mut PJRT_DeviceDescription,
    device_kind: *const c_char, ; device_kind_size: usize
});
c_struct!(PJRT_Device_GetDescription_Args {
    struct_size: usize, extension_start: Ext, device: *mut PJRT_Device,
    ; device_description: *mut PJRT_DeviceDescription
});
c_struct!(PJRT_Device_LocalHardwareId_Args {
    struct_size: usize, extension_start: Ext, device: *mut PJRT_Device, ; local_hardware_id: c_int
});

c_struct!(PJRT_Executable_Destroy_Args { struct_size: usize, extension_start: Ext, ; executable: *mut PJRT_Executable });
c_struct!(PJRT_LoadedExecutable_Destroy_Args {
    struct_size: usize, extension_start: Ext, ; executable: *mut PJRT_LoadedExecutable
});
c_struct!(PJRT_LoadedExecutable_GetExecutable_Args {
    struct_size: usize, extension_start: Ext, loaded_executable: *mut PJRT_LoadedExecutable,
    ; executable: *mut PJRT_Executable
});
c_struct!(PJRT_LoadedExecutable_AddressableDevices_Args {
    struct_size: usize, extension_start: Ext, executable: *mut PJRT_LoadedExecutable,
    addressable_devices: *const *mut PJRT_Device, ; num_addressable_devices: usize
});
c_struct!(PJRT_Executable_NumReplicas_Args {
    struct_size: usize, extension_start: Ext, executable: *mut PJRT_Executable, ; num_replicas: usize
});
c_struct!(PJRT_Executable_NumPartitions_Args {
    struct_size: usize, extension_start: Ext, executable: *mut PJRT_Executable, ; num_partitions: usize
});
c_struct!(PJRT_Executable_NumOutputs_Args {
    struct_size: usize, extension_start: Ext, executable: *mut PJRT_Executable, ; num_outputs: usize
});
c_struct!(PJRT_Executable_OutputElementTypes_Args {
    struct_size: usize, extension_start: Ext, executable: *mut PJRT_Executable,
    output_types: *mut PJRT_Buffer_Type, ; num_output_types: usize
});
c_struct!(PJRT_Executable_OutputDimensions_Args {
    struct_size: usize, extension_start: Ext, executable: *mut PJRT_Executable, num_outputs: usize,
    dims: *const i64, ; dim_sizes: *const usize
});
c_struct!(PJRT_ExecuteOptions {
    struct_size: usize, extension_start: Ext, send_callbacks: *mut *mut PJRT_SendCallbackInfo,
    recv_callbacks: *mut *mut PJRT_RecvCallbackInfo, num_send_ops: usize, num_recv_ops: usize,
    launch_id: c_int, non_donatable_input_indices: *const i64, num_non_donatable_input_indices: usize,
    context: *mut PJRT_ExecuteContext, call_location: *const c_char, num_tasks: usize,
    task_ids: *mut c_int, ; incarnation_ids: *mut i64
});
c_struct!(PJRT_LoadedExecutable_Execute_Args {
    struct_size: usize, extension_start: Ext, executable: *mut PJRT_LoadedExecutable,
    options: *mut PJRT_ExecuteOptions, argument_lists: *const *const *mut PJRT_Buffer, num_devices: usize,
    num_args: usize, output_lists: *const *mut *mut PJRT_Buffer, device_complete_events: *mut *mut PJRT_Event,
    ; execute_device: *mut PJRT_Device
});

c_struct!(PJRT_Buffer_Destroy_Args { struct_size: usize, extension_start: Ext, ; buffer: *mut PJRT_Buffer });
c_struct!(PJRT_Buffer_ElementType_Args {
    struct_size: usize, extension_start: Ext, buffer: *mut PJRT_Buffer, ; type_: PJRT_Buffer_Type
});
c_struct!(PJRT_Buffer_Dimensions_Args {
    struct_size: usize, extension_start: Ext, buffer: *mut PJRT_Buffer, dims: *const i64, ; num_dims: usize
});
c_struct!(PJRT_Buffer_ToHostBuffer_Args {
    struct_size: usize, extension_start: Ext, src: *mut PJRT_Buffer, host_layout: *mut c_void,
    dst: *mut c_void, dst_size: usize, ; event: *mut PJRT_Event
});
c_struct!(PJRT_Buffer_OnDeviceSizeInBytes_Args {
    struct_size: usize, extension_start: Ext, buffer: *mut PJRT_Buffer, ; on_device_size_in_bytes: usize
});
c_struct!(PJRT_Buffer_IsDeleted_Args {
    struct_size: usize, extension_start: Ext, buffer: *mut PJRT_Buffer, ; is_deleted: bool
});
c_struct!(PJRT_Buffer_Device_Args {
    struct_size: usize, extension_start: Ext, buffer: *mut PJRT_Buffer, ; device: *mut PJRT_Device
});
c_struct!(PJRT_Buffer_ReadyEvent_Args {
    struct_size: usize, extension_start: Ext, buffer: *mut PJRT_Buffer, ; event: *mut PJRT_Event
});

/// Argument layouts of every struct declared above (checked by `tests/abi.rs`).
pub const ARGS_LAYOUT: &[StructLayout] = &[
    PJRT_Api_Version::LAYOUT,
    PJRT_Error_Destroy_Args::LAYOUT,
    PJRT_Error_Message_Args::LAYOUT,
    PJRT_Error_GetCode_Args::LAYOUT,
    PJRT_NamedValue::LAYOUT,
    PJRT_Plugin_Initialize_Args::LAYOUT,
    PJRT_Plugin_Attributes_Args::LAYOUT,
    PJRT_Event_Destroy_Args::LAYOUT,
    PJRT_Event_IsReady_Args::LAYOUT,
    PJRT_Event_Error_Args::LAYOUT,
    PJRT_Event_Await_Args::LAYOUT,
    PJRT_Client_Create_Args::LAYOUT,
    PJRT_Client_Destroy_Args::LAYOUT,
    PJRT_Client_PlatformName_Args::LAYOUT,
    PJRT_Client_PlatformVersion_Args::LAYOUT,
    PJRT_Client_Devices_Args::LAYOUT,
    PJRT_Client_AddressableDevices_Args::LAYOUT,
    PJRT_Program::LAYOUT,
    PJRT_Client_Compile_Args::LAYOUT,
    PJRT_Client_DefaultDeviceAssignment_Args::LAYOUT,
    PJRT_Client_BufferFromHostBuffer_Args::LAYOUT,
    PJRT_DeviceDescription_Id_Args::LAYOUT,
    PJRT_DeviceDescription_Kind_Args::LAYOUT,
    PJRT_Device_GetDescription_Args::LAYOUT,
    PJRT_Device_LocalHardwareId_Args::LAYOUT,
    PJRT_Executable_Destroy_Args::LAYOUT,
    PJRT_LoadedExecutable_Destroy_Args::LAYOUT,
    PJRT_LoadedExecutable_GetExecutable_Args::LAYOUT,
    PJRT_LoadedExecutable_AddressableDevices_Args::LAYOUT,
    PJRT_Executable_NumReplicas_Args::LAYOUT,
    PJRT_Executable_NumPartitions_Args::LAYOUT,
    PJRT_Executable_NumOutputs_Args::LAYOUT,
    PJRT_Executable_OutputElementTypes_Args::LAYOUT,
    PJRT_Executable_OutputDimensions_Args::LAYOUT,
    PJRT_ExecuteOptions::LAYOUT,
    PJRT_LoadedExecutable_Execute_Args::LAYOUT,
    PJRT_Buffer_Destroy_Args::LAYOUT,
    PJRT_Buffer_ElementType_Args::LAYOUT,
    PJRT_Buffer_Dimensions_Args::LAYOUT,
    PJRT_Buffer_ToHostBuffer_Args::LAYOUT,
    PJRT_Buffer_OnDeviceSizeInBytes_Args::LAYOUT,
    PJRT_Buffer_IsDeleted_Args::LAYOUT,
    PJRT_Buffer_Device_Args::LAYOUT,
    PJRT_Buffer_ReadyEvent_Args::LAYOUT,
];

/// A function-table entry taking `*mut A` and returning an error or null.
pub type Fallible<A> = Option<unsafe extern "C" fn(args: *mut A) -> *mut PJRT_Error>;
/// A function-table entry taking `*mut A` and returning nothing.
pub type Infallible<A> = Option<unsafe extern "C" fn(args: *mut A)>;
/// A slot this crate never calls.
pub type Unused = Option<unsafe extern "C" fn()>;

/// Declares `PJRT_Api` from its slots in header order.
macro_rules! api_table {
    ($($slot:ident : $t:ty,)*) => {
        #[repr(C)]
        pub struct PJRT_Api {
            pub struct_size: usize,
            pub extension_start: Ext,
            pub pjrt_api_version: PJRT_Api_Version,
            $(pub $slot: $t,)*
        }

        /// Offsets of every `PJRT_Api` slot, checked by `tests/abi.rs`.
        pub const API_LAYOUT: &[(&str, usize)] = &[
            ("pjrt_api_version", offset_of!(PJRT_Api, pjrt_api_version)),
            $((stringify!($slot), offset_of!(PJRT_Api, $slot)),)*
        ];
    };
}

api_table! {
    PJRT_Error_Destroy: Infallible<PJRT_Error_Destroy_Args>,
    PJRT_Error_Message: Infallible<PJRT_Error_Message_Args>,
    PJRT_Error_GetCode: Fallible<PJRT_Error_GetCode_Args>,
    PJRT_Plugin_Initialize: Fallible<PJRT_Plugin_Initialize_Args>,
    PJRT_Plugin_Attributes: Fallible<PJRT_Plugin_Attributes_Args>,
    PJRT_Event_Destroy: Fallible<PJRT_Event_Destroy_Args>,
    PJRT_Event_IsReady: Fallible<PJRT_Event_IsReady_Args>,
    PJRT_Event_Error: Fallible<PJRT_Event_Error_Args>,
    PJRT_Event_Await: Fallible<PJRT_Event_Await_Args>,
    PJRT_Event_OnReady: Unused,
    PJRT_Client_Create: Fallible<PJRT_Client_Create_Args>,
    PJRT_Client_Destroy: Fallible<PJRT_Client_Destroy_Args>,
    PJRT_Client_PlatformName: Fallible<PJRT_Client_PlatformName_Args>,
    PJRT_Client_ProcessIndex: Unused,
    PJRT_Client_PlatformVersion: Fallible<PJRT_Client_PlatformVersion_Args>,
    PJRT_Client_Devices: Fallible<PJRT_Client_Devices_Args>,
    PJRT_Client_AddressableDevices: Fallible<PJRT_Client_AddressableDevices_Args>,
    PJRT_Client_LookupDevice: Unused,
    PJRT_Client_LookupAddressableDevice: Unused,
    PJRT_Client_AddressableMemories: Unused,
    PJRT_Client_Compile: Fallible<PJRT_Client_Compile_Args>,
    PJRT_Client_DefaultDeviceAssignment: Fallible<PJRT_Client_DefaultDeviceAssignment_Args>,
    PJRT_Client_BufferFromHostBuffer: Fallible<PJRT_Client_BufferFromHostBuffer_Args>,
    PJRT_DeviceDescription_Id: Fallible<PJRT_DeviceDescription_Id_Args>,
    PJRT_DeviceDescription_ProcessIndex: Unused,
    PJRT_DeviceDescription_Attributes: Unused,
    PJRT_DeviceDescription_Kind: Fallible<PJRT_DeviceDescription_Kind_Args>,
    PJRT_DeviceDescription_DebugString: Unused,
    PJRT_DeviceDescription_ToString: Unused,
    PJRT_Device_GetDescription: Fallible<PJRT_Device_GetDescription_Args>,
    PJRT_Device_IsAddressable: Unused,
    PJRT_Device_LocalHardwareId: Fallible<PJRT_Device_LocalHardwareId_Args>,
    PJRT_Device_AddressableMemories: Unused,
    PJRT_Device_DefaultMemory: Unused,
    PJRT_Device_MemoryStats: Unused,
    PJRT_Memory_Id: Unused,
    PJRT_Memory_Kind: Unused,
    PJRT_Memory_DebugString: Unused,
    PJRT_Memory_ToString: Unused,
    PJRT_Memory_AddressableByDevices: Unused,
    PJRT_Executable_Destroy: Fallible<PJRT_Executable_Destroy_Args>,
    PJRT_Executable_Name: Unused,
    PJRT_Executable_NumReplicas: Fallible<PJRT_Executable_NumReplicas_Args>,
    PJRT_Executable_NumPartitions: Fallible<PJRT_Executable_NumPartitions_Args>,
    PJRT_Executable_NumOutputs: Fallible<PJRT_Executable_NumOutputs_Args>,
    PJRT_Executable_SizeOfGeneratedCodeInBytes: Unused,
    PJRT_Executable_GetCostAnalysis: Unused,
    PJRT_Executable_OutputMemoryKinds: Unused,
    PJRT_Executable_OptimizedProgram: Unused,
    PJRT_Executable_Serialize: Unused,
    PJRT_LoadedExecutable_Destroy: Fallible<PJRT_LoadedExecutable_Destroy_Args>,
    PJRT_LoadedExecutable_GetExecutable: Fallible<PJRT_LoadedExecutable_GetExecutable_Args>,
    PJRT_LoadedExecutable_AddressableDevices: Fallible<PJRT_LoadedExecutable_AddressableDevices_Args>,
    PJRT_LoadedExecutable_Delete: Unused,
    PJRT_LoadedExecutable_IsDeleted: Unused,
    PJRT_LoadedExecutable_Execute: Fallible<PJRT_LoadedExecutable_Execute_Args>,
    PJRT_Executable_DeserializeAndLoad: Unused,
    PJRT_LoadedExecutable_Fingerprint: Unused,
    PJRT_Buffer_Destroy: Fallible<PJRT_Buffer_Destroy_Args>,
    PJRT_Buffer_ElementType: Fallible<PJRT_Buffer_ElementType_Args>,
    PJRT_Buffer_Dimensions: Fallible<PJRT_Buffer_Dimensions_Args>,
    PJRT_Buffer_UnpaddedDimensions: Unused,
    PJRT_Buffer_DynamicDimensionIndices: Unused,
    PJRT_Buffer_GetMemoryLayout: Unused,
    PJRT_Buffer_OnDeviceSizeInBytes: Fallible<PJRT_Buffer_OnDeviceSizeInBytes_Args>,
    PJRT_Buffer_Device: Fallible<PJRT_Buffer_Device_Args>,
    PJRT_Buffer_Memory: Unused,
    PJRT_Buffer_Delete: Unused,
    PJRT_Buffer_IsDeleted: Fallible<PJRT_Buffer_IsDeleted_Args>,
    PJRT_Buffer_CopyToDevice: Unused,
    PJRT_Buffer_ToHostBuffer: Fallible<PJRT_Buffer_ToHostBuffer_Args>,
    PJRT_Buffer_IsOnCpu: Unused,
    PJRT_Buffer_ReadyEvent: Fallible<PJRT_Buffer_ReadyEvent_Args>,
    PJRT_Buffer_UnsafePointer: Unused,
    PJRT_Buffer_IncreaseExternalReferenceCount: Unused,
    PJRT_Buffer_DecreaseExternalReferenceCount: Unused,
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer: Unused,
    PJRT_CopyToDeviceStream_Destroy: Unused,
    PJRT_CopyToDeviceStream_AddChunk: Unused,
    PJRT_CopyToDeviceStream_TotalBytes: Unused,
    PJRT_CopyToDeviceStream_GranuleSize: Unused,
    PJRT_CopyToDeviceStream_CurrentBytes: Unused,
    PJRT_TopologyDescription_Create: Unused,
    PJRT_TopologyDescription_Destroy: Unused,
    PJRT_TopologyDescription_PlatformName: Unused,
    PJRT_TopologyDescription_PlatformVersion: Unused,
    PJRT_TopologyDescription_GetDeviceDescriptions: Unused,
    PJRT_TopologyDescription_Serialize: Unused,
    PJRT_TopologyDescription_Attributes: Unused,
    PJRT_Compile: Unused,
    PJRT_Executable_OutputElementTypes: Fallible<PJRT_Executable_OutputElementTypes_Args>,
    PJRT_Executable_OutputDimensions: Fallible<PJRT_Executable_OutputDimensions_Args>,
    PJRT_Buffer_CopyToMemory: Unused,
    PJRT_Client_CreateViewOfDeviceBuffer: Unused,
    PJRT_Executable_Fingerprint: Unused,
    PJRT_Client_TopologyDescription: Unused,
    PJRT_Executable_GetCompiledMemoryStats: Unused,
    PJRT_Memory_Kind_Id: Unused,
    PJRT_ExecuteContext_Create: Unused,
    PJRT_ExecuteContext_Destroy: Unused,
    PJRT_Buffer_CopyRawToHost: Unused,
    PJRT_AsyncHostToDeviceTransferManager_Destroy: Unused,
    PJRT_AsyncHostToDeviceTransferManager_TransferData: Unused,
    PJRT_Client_CreateBuffersForAsyncHostToDevice: Unused,
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer: Unused,
    PJRT_AsyncHostToDeviceTransferManager_Device: Unused,
    PJRT_AsyncHostToDeviceTransferManager_BufferCount: Unused,
    PJRT_AsyncHostToDeviceTransferManager_BufferSize: Unused,
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError: Unused,
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata: Unused,
    PJRT_Client_DmaMap: Unused,
    PJRT_Client_DmaUnmap: Unused,
    PJRT_Client_CreateUninitializedBuffer: Unused,
    PJRT_Client_UpdateGlobalProcessInfo: Unused,
    PJRT_TopologyDescription_Deserialize: Unused,
    PJRT_Client_CreateAliasBuffer: Unused,
    PJRT_Client_FulfillAliasBuffer: Unused,
    PJRT_LoadedExecutable_GetDeviceAssignment: Unused,
}

/// `PJRT_Api_STRUCT_SIZE`: the table up to and including its last slot.
pub const PJRT_API_STRUCT_SIZE: usize =
    offset_of!(PJRT_Api, PJRT_LoadedExecutable_GetDeviceAssignment) + size_of::<Unused>();

/// Signature of the plugin's exported entry point.
pub type GetPjrtApiFn = unsafe extern "C" fn() -> *const PJRT_Api;
