//! Filetests of the generic passes and the analysis printers (testdata/passes,
//! testdata/analysis), run in-process through `tessera opt`'s driver by tessera-filetest.
//! `FILETEST=substring cargo test -p tessera-pass --test filetests` runs only matching files.

use tessera_filetest::{assert_dirs, filecheck};
use tessera_pass::Registry;

#[test]
fn filetests() {
    assert_dirs(&["passes", "analysis"], &Registry::with_generic_passes());
}

#[test]
fn filecheck_directives_behave_like_llvm() {
    let out = "%a = f32[4]{0} parameter(0)\n%b = f32[4]{0} negate(f32[4]{0} %a)\nROOT %c = f32[4]{0} add(f32[4]{0} %a, f32[4]{0} %b)\n";
    let ok = [
        "// CHECK: parameter(0)\n// CHECK-NEXT: negate\n",
        "// CHECK: %[[P:[a-z]+]] = f32[4]{0} parameter\n// CHECK: negate(f32[4]{0} %[[P]])\n",
        "// CHECK: ROOT\n// CHECK-SAME: add(\n",
        "// CHECK: parameter\n// CHECK-NOT: exponential\n// CHECK: add\n",
        "// CHECK-DAG: negate\n// CHECK-DAG: parameter\n",
    ];
    for c in ok {
        filecheck("checks", c, out).unwrap_or_else(|e| panic!("{c}\n{e}"));
    }
    let bad = [
        "// CHECK: parameter(0)\n// CHECK-NEXT: add\n",
        "// CHECK: %[[P:[a-z]+]] = f32[4]{0} negate\n// CHECK: parameter(f32[4]{0} %[[P]])\n",
        "// CHECK: ROOT\n// CHECK-SAME: negate\n",
        "// CHECK: parameter\n// CHECK-NOT: negate\n// CHECK: add\n",
        "// CHECK: subtract\n",
    ];
    for c in bad {
        assert!(filecheck("checks", c, out).is_err(), "accepted:\n{c}");
    }
}
