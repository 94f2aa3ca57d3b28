//! XLA's own dump files, as users hand them to us: every file of testdata/dumps (written by
//! scripts/fixtures/make_xla_dumps.py with `xla_dump_to`: before propagation, before and after
//! spmd-partitioning, for eight jax models in both propagation modes) parses, prints, and the
//! print parses to an equal module that prints to the same bytes. Most use the dumps'
//! `%x#N` tuple-element shorthand; the expectations for how it reads (names, order) were checked
//! against jaxlib with scripts/oracles/check_dump_shorthand.py.

use std::path::Path;

use tessera_hlo::text::{module_diff, parse_module, print_module, PrintOptions};

#[test]
fn xla_dump_files_parse_print_and_reparse_equal() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/dumps");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    let (mut with_shorthand, mut made) = (0, 0);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let m = parse_module(&text).unwrap_or_else(|e| panic!("{}:{e}", f.display()));
        let printed = print_module(&m, &PrintOptions::default());
        let again = parse_module(&printed).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(module_diff(&m, &again), None, "{}", f.display());
        assert_eq!(
            print_module(&again, &PrintOptions::default()),
            printed,
            "{}",
            f.display()
        );
        // Every `#` of an operand became a get-tuple-element of its own name.
        let shorthand = text.matches('#').count();
        if shorthand > 0 {
            with_shorthand += 1;
            let gtes = |t: &str| t.matches(" get-tuple-element(").count();
            assert!(gtes(&printed) > gtes(&text), "{}", f.display());
            made += gtes(&printed) - gtes(&text);
        }
        assert!(!printed.contains('#'), "{}", f.display());
    }
    eprintln!(
        "xla dumps: {} files parsed, printed and re-parsed equal; {with_shorthand} use the %x#N \
         shorthand ({made} get-tuple-elements made)",
        files.len()
    );
    assert_eq!(
        files.len(),
        48,
        "testdata/dumps should hold 8 models x 2 modes x 3 stages"
    );
}
