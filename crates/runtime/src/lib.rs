//! PJRT runtime.
