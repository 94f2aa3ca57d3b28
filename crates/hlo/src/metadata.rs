//! Op metadata, frontend attributes and the module's stack-frame tables.

use std::collections::BTreeMap;

/// `metadata={op_type="Add" op_name="jit(f)/add" source_file="f.py" source_line=3 ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct OpMetadata {
    pub op_type: String,
    pub op_name: String,
    pub source_file: String,
    pub source_line: i32,
    pub source_end_line: i32,
    pub source_column: i32,
    pub source_end_column: i32,
    /// `xla.ProfileType` values.
    pub profile_type: Vec<i32>,
    pub size_of_generated_code_in_bytes: i64,
    pub size_of_memory_working_set_in_bytes: i64,
    pub deduplicated_name: String,
    pub preserve_layout: bool,
    pub stack_frame_id: i32,
    pub scheduling_name: String,
}

impl OpMetadata {
    pub fn is_empty(&self) -> bool {
        *self == OpMetadata::default()
    }
}

/// `frontend_attributes={key="value", ...}`: free-form, kept sorted by key as XLA prints them.
pub type FrontendAttributes = BTreeMap<String, String>;

/// One `FileLocations` entry: `{file_name_id=1 function_name_id=1 line=3 end_line=3 column=5 end_column=8}`.
/// Ids are 1-based indices into the name tables, as in the text.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct FileLocation {
    pub file_name_id: i32,
    pub function_name_id: i32,
    pub line: i32,
    pub end_line: i32,
    pub column: i32,
    pub end_column: i32,
}

/// One `StackFrames` entry: `{file_location_id=1 parent_frame_id=0}` (0 is no parent).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct StackFrame {
    pub file_location_id: i32,
    pub parent_frame_id: i32,
}

/// The module-level tables that `metadata={stack_frame_id=N}` refers to (`xla.StackFrameIndexProto`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct StackFrameIndex {
    pub file_names: Vec<String>,
    pub function_names: Vec<String>,
    pub file_locations: Vec<FileLocation>,
    pub stack_frames: Vec<StackFrame>,
}

impl StackFrameIndex {
    pub fn is_empty(&self) -> bool {
        self.file_names.is_empty()
            && self.function_names.is_empty()
            && self.file_locations.is_empty()
            && self.stack_frames.is_empty()
    }
}
