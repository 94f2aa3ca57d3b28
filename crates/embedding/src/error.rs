//! The one error type of the crate: every message names the table, feature, stack or JSON path
//! it is about and what was expected.

/// Errors of configuration, layout, checkpoints and preprocessing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbeddingError {
    /// Malformed JSON text (with serde_json's line and column).
    #[error("{path}: invalid JSON: {message}")]
    Json { path: String, message: String },
    /// A configuration field that is missing, of the wrong type or out of range. `at` is the
    /// JSON path (`tables[2].optimizer.beta_1`) or the object's name.
    #[error("{at}: {message}")]
    Config { at: String, message: String },
    /// Stacking could not be done as asked (the seed's "... already exists!", jax's checks).
    #[error("stacking: {0}")]
    Stacking(String),
    /// Table or slot values of the wrong shape, or a sharded array that does not fit the layout.
    #[error("{at}: {message}")]
    Shape { at: String, message: String },
    /// An input batch that does not fit its feature (ids out of range, bad row splits, ...).
    #[error("feature '{feature}': {message}")]
    Input { feature: String, message: String },
    /// A partition holds more ids than the stack's limit and dropping is off.
    #[error("{0}")]
    Limit(String),
    /// Reading or writing files (checkpoints, npz).
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// Building, compiling or running a device program, or moving values to and from devices.
    #[error("{at}: {message}")]
    Device { at: String, message: String },
}

pub type Result<T> = std::result::Result<T, EmbeddingError>;

impl EmbeddingError {
    /// The error with the input file it is about: an [`EmbeddingError::Input`] or
    /// [`EmbeddingError::Limit`] raised while reading or preprocessing the batch in `file`
    /// names it first (once).
    pub fn in_file(self, file: &str) -> EmbeddingError {
        match self {
            EmbeddingError::Input { feature, message } if !message.starts_with(file) => {
                EmbeddingError::Input {
                    feature,
                    message: format!("{file}: {message}"),
                }
            }
            EmbeddingError::Limit(m) if !m.starts_with(file) => {
                EmbeddingError::Limit(format!("{file}: {m}"))
            }
            e => e,
        }
    }
}

pub(crate) fn config_err(at: impl Into<String>, message: impl Into<String>) -> EmbeddingError {
    EmbeddingError::Config {
        at: at.into(),
        message: message.into(),
    }
}
