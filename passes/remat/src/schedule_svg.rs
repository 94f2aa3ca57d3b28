//! An SVG of memory over schedule positions (filled in below).
