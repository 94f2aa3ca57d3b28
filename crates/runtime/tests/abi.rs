//! Checks the hand-written FFI declarations against the plugin's own
//! `pjrt_c_api.h`: a C program compiled with `cc` prints every
//! `*_STRUCT_SIZE`, every field offset and every `PJRT_Api` slot offset the
//! Rust side declares, and the test compares them one by one.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use tessera_runtime::ffi::{API_LAYOUT, ARGS_LAYOUT, PJRT_API_STRUCT_SIZE};
use tessera_runtime::Plugin;

fn header_dir() -> PathBuf {
    let plugin = Plugin::default_path();
    let dir = plugin
        .parent()
        .expect("plugin path has a parent")
        .join("include");
    assert!(
        dir.join("pjrt_c_api.h").is_file(),
        "pjrt_c_api.h not found next to the plugin ({}): run scripts/install-pjrt.sh",
        dir.display()
    );
    dir
}

/// The C spelling of a Rust field name (`type_` -> `type`).
fn c_field(name: &str) -> &str {
    name.strip_suffix('_').unwrap_or(name)
}

#[test]
fn ffi_layout_matches_pjrt_c_api_header() {
    let include = header_dir();
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"pjrt_c_api.h\"\nint main(void) {\n",
    );
    let mut expected = Vec::new();
    for s in ARGS_LAYOUT {
        writeln!(src, "  printf(\"%zu\\n\", (size_t){}_STRUCT_SIZE);", s.name).unwrap();
        expected.push((format!("{}_STRUCT_SIZE", s.name), s.struct_size));
        for (f, off) in s.fields {
            writeln!(
                src,
                "  printf(\"%zu\\n\", offsetof({}, {}));",
                s.name,
                c_field(f)
            )
            .unwrap();
            expected.push((format!("offsetof({}, {})", s.name, f), *off));
        }
    }
    for (slot, off) in API_LAYOUT {
        writeln!(src, "  printf(\"%zu\\n\", offsetof(PJRT_Api, {slot}));").unwrap();
        expected.push((format!("offsetof(PJRT_Api, {slot})"), *off));
    }
    src.push_str("  printf(\"%zu\\n\", (size_t)PJRT_Api_STRUCT_SIZE);\n");
    expected.push(("PJRT_Api_STRUCT_SIZE".into(), PJRT_API_STRUCT_SIZE));
    src.push_str("  return 0;\n}\n");

    let dir = std::env::temp_dir().join(format!("tessera-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&c, &src).unwrap();
    let out = Command::new("cc")
        .arg("-I")
        .arg(&include)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C compiler `cc` is needed for the ABI check");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let values: Vec<usize> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(values.len(), expected.len());
    let mismatches: Vec<String> = expected
        .iter()
        .zip(&values)
        .filter(|((_, rust), c)| rust != *c)
        .map(|((what, rust), c)| format!("{what}: rust {rust}, header {c}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "ABI mismatches:\n{}",
        mismatches.join("\n")
    );
}

/// The sizes the plugin is known to insist on (ORACLE.md quotes the client
/// one), kept as constants so a regression shows even without a C compiler.
#[test]
fn known_struct_sizes() {
    use tessera_runtime::ffi::*;
    assert_eq!(PJRT_Client_Create_Args::STRUCT_SIZE, 88);
    assert_eq!(PJRT_Event_IsReady_Args::STRUCT_SIZE, 25);
    assert_eq!(PJRT_NamedValue::STRUCT_SIZE, 56);
}
