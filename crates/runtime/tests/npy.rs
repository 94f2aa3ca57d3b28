//! The `.npy` reader on files numpy itself wrote (testdata/npy, see its README).

use tessera_hlo::ElementType;
use tessera_runtime::npy;
use tessera_runtime::Scalar;

fn load(name: &str, expected: Option<ElementType>) -> tessera_runtime::HostArray {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/npy/").to_string() + name;
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    npy::read(&bytes, expected).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn floats(a: &tessera_runtime::HostArray) -> Vec<f64> {
    (0..a.element_count()).map(|k| a.get(k).as_f64()).collect()
}

#[test]
fn reads_numpy_files() {
    let a = load("f32.npy", None);
    assert_eq!((a.ty, a.dims.clone()), (ElementType::F32, vec![2, 3]));
    assert_eq!(floats(&a), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // Our writer produces numpy's bytes exactly.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/npy/f32.npy");
    assert_eq!(npy::write(&a), std::fs::read(path).unwrap());

    let a = load("fort.npy", None);
    assert_eq!((a.ty, a.dims.clone()), (ElementType::S64, vec![2, 3]));
    assert_eq!(floats(&a), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);

    let a = load("be.npy", None);
    assert_eq!(a.ty, ElementType::F64);
    assert_eq!(floats(&a), vec![0.0, 1.0, 2.0, 3.0]);

    let a = load("bool.npy", None);
    assert_eq!(
        (a.get(0), a.get(1)),
        (Scalar::Pred(true), Scalar::Pred(false))
    );

    let a = load("c64.npy", None);
    assert_eq!(a.get(1), Scalar::Complex(3.0, -4.0));

    let a = load("bf16.npy", Some(ElementType::BF16));
    assert_eq!(floats(&a), vec![1.0, -2.0, 0.5]);

    let a = load("scalar.npy", None);
    assert_eq!((a.ty, a.dims.len()), (ElementType::F16, 0));
    assert_eq!(a.get(0), Scalar::Float(1.5));
}
