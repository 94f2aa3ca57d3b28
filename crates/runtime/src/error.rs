//! Errors of the runtime. Every failure the plugin reports becomes
//! [`Error::Pjrt`] carrying the plugin's own message and status code; misuse
//! detected on our side (bad shapes, stale handles, ...) has its own variant so
//! callers can match on it.

use std::path::PathBuf;

/// Status codes of the PJRT C API (`PJRT_Error_Code`, Abseil's codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
    /// A code this crate does not know (a newer plugin), kept verbatim.
    Other(i32),
}

impl ErrorCode {
    pub(crate) fn from_raw(code: i32) -> Self {
        match code {
            1 => Self::Cancelled,
            2 => Self::Unknown,
            3 => Self::InvalidArgument,
            4 => Self::DeadlineExceeded,
            5 => Self::NotFound,
            6 => Self::AlreadyExists,
            7 => Self::PermissionDenied,
            8 => Self::ResourceExhausted,
            9 => Self::FailedPrecondition,
            10 => Self::Aborted,
            11 => Self::OutOfRange,
            12 => Self::Unimplemented,
            13 => Self::Internal,
            14 => Self::Unavailable,
            15 => Self::DataLoss,
            16 => Self::Unauthenticated,
            other => Self::Other(other),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "PJRT plugin not found at {path}: run scripts/install-pjrt.sh or set TESSERA_PJRT_PLUGIN"
    )]
    PluginNotFound { path: PathBuf },
    #[error("cannot load PJRT plugin {path}: {message}")]
    PluginLoad { path: PathBuf, message: String },
    #[error("PJRT plugin {path} speaks C API {major}.{minor}; this crate needs 0.{needed} or newer with major 0")]
    ApiVersion {
        path: PathBuf,
        major: i32,
        minor: i32,
        needed: i32,
    },
    #[error("PJRT plugin does not provide {0}")]
    MissingFunction(&'static str),
    /// An error reported by the plugin, with its message.
    #[error("{call}: {code:?}: {message}")]
    Pjrt {
        call: &'static str,
        code: ErrorCode,
        message: String,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("unsupported element type {0}")]
    UnsupportedType(String),
    #[error("{0}")]
    ShapeMismatch(String),
    #[error("unknown or released {kind} handle {handle}")]
    InvalidHandle { kind: &'static str, handle: u64 },
    #[error("device {device}: {needed} bytes needed but only {available} of the {budget}-byte budget can be freed")]
    OutOfMemory {
        device: usize,
        needed: u64,
        available: u64,
        budget: u64,
    },
    #[error("plan step {step}: {message}")]
    Plan { step: usize, message: String },
    /// Splitting or assembling a sharded value failed.
    #[error(transparent)]
    Shard(#[from] crate::sharded::ShardError),
    /// A module given to the equivalence harness cannot be run as asked.
    #[error("{module}: {message}")]
    Module { module: String, message: String },
}

impl Error {
    /// The plugin's status code, when the plugin reported this error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Pjrt { code, .. } => Some(*code),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
