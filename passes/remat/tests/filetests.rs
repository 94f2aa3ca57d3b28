//! Filetests of the schedulers, the memory accounting and rematerialization (testdata/remat),
//! run in-process through `tessera opt`'s driver by tessera-filetest.
//! `FILETEST=substring cargo test -p tessera-remat --test filetests` runs only matching files.

use tessera_filetest::assert_dirs;
use tessera_pass::Registry;

#[test]
fn filetests() {
    let mut r = Registry::with_generic_passes();
    tessera_remat::register(&mut r);
    assert_dirs(&["remat"], &r);
}
