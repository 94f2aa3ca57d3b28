//! The variable-dedup round trip as a user runs it, through the binary:
//! `tessera opt IN --passes variable-dedup -o OUT`, then `tessera compare IN OUT --devices 1`;
//! for a sharded IN, OUT partitioned for 4 devices by XLA's own partitioner (Tessera's is not
//! on main yet: the fixture `train_step_sharded.dedup.after_spmd.hlo`, made by
//! scripts/fixtures/make_dedup_partitioned.py) then `tessera compare IN OUT_PARTITIONED --devices 4`,
//! and OUT itself with `--partition-with-xla`. `tessera run` feeds OUT the original's argument files
//! through its argument map.

use std::path::Path;

mod support;

use support::{scratch, tessera, testdata, text};

fn module(name: &str) -> String {
    testdata(&format!("dedup/modules/{name}.hlo"))
}

fn opt(input: &str, out: &Path) {
    let o = tessera(&[
        "opt",
        input,
        "--passes",
        "variable-dedup",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let written = std::fs::read_to_string(out).unwrap();
    assert!(
        written.contains("tessera.argument_map=\"0,1,0,2,2,3,4,0,4,2\""),
        "{written}"
    );
}

#[test]
fn opt_then_compare_on_one_device() {
    let dir = scratch("dedup-cli-one");
    let input = module("train_step");
    let out = dir.join("out.hlo");
    opt(&input, &out);
    let o = tessera(&["compare", &input, out.to_str().unwrap(), "--devices", "1"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("equivalent on 1 device"), "{t}");
    assert_eq!(t.matches(": ok in f64: max abs error").count(), 4, "{t}");

    // A tampered map (w1's and m1's arguments swapped: same shapes, other numbers) is caught.
    let good = std::fs::read_to_string(&out).unwrap();
    let bad = good.replace(
        "tessera.argument_map=\"0,1,0,2,2,3,4,0,4,2\"",
        "tessera.argument_map=\"4,1,4,2,2,3,0,4,0,2\"",
    );
    let bad_path = dir.join("bad.hlo");
    std::fs::write(&bad_path, bad).unwrap();
    let o = tessera(&[
        "compare",
        &input,
        bad_path.to_str().unwrap(),
        "--devices",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("DIFFERS"), "{}", text(&o));

    // `tessera run` with the original's argument files: IN and OUT give the same outputs;
    // the later arguments of a resource may be left out (the first one's array is used).
    // Variable values: the outputs of one run of IN (w1 and m1 are f32[8,32], w2 f32[32,4]).
    let ins = dir.join("in");
    let o = tessera(&[
        "run",
        &input,
        "--seed",
        "4",
        "--outputs",
        ins.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let args = dir.join("args");
    std::fs::create_dir_all(&args).unwrap();
    let out0 = std::fs::read(ins.join("out0.npy")).unwrap();
    let out1 = std::fs::read(ins.join("out1.npy")).unwrap();
    let out2 = std::fs::read(ins.join("out2.npy")).unwrap();
    for (k, bytes) in [(0, &out0), (2, &out0), (3, &out1), (6, &out2), (9, &out1)] {
        std::fs::write(args.join(format!("arg{k}.npy")), bytes).unwrap();
    }
    std::fs::write(args.join("arg1.npy"), npy_f32(&[16, 8], 0.25)).unwrap();
    std::fs::write(args.join("arg5.npy"), npy_f32(&[16, 4], -0.5)).unwrap();
    let run = |m: &str| {
        let o = tessera(&["run", m, "--inputs", args.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(run(&input), run(out.to_str().unwrap()));
    // Two different arrays for one variable: refused, naming both arguments.
    std::fs::write(args.join("arg7.npy"), &out2).unwrap();
    let o = tessera(&["run", &input, "--inputs", args.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains(
            "argument 7 is resource params/w1, as argument 0 is, but holds another array"
        ),
        "{}",
        text(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A float32 .npy file of one value.
fn npy_f32(dims: &[usize], v: f32) -> Vec<u8> {
    let shape: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
        shape.join(", ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for _ in 0..dims.iter().product::<usize>() {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

#[test]
fn opt_then_compare_sharded_on_four_devices() {
    let dir = scratch("dedup-cli-four");
    let input = module("train_step_sharded");
    let out = dir.join("out.hlo");
    opt(&input, &out);
    let written = std::fs::read_to_string(&out).unwrap();
    // The merged w1 carries the sharding one of its duplicates had.
    assert!(
        written.contains("%w1.fwd = f32[8,32]{1,0} parameter(0), sharding={replicated}"),
        "{written}"
    );
    let o = tessera(&[
        "compare",
        &input,
        out.to_str().unwrap(),
        "--devices",
        "4",
        "--partition-with-xla",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("equivalent on 4 devices"), "{t}");

    // OUT partitioned for 4 devices (per-device parameters, collectives), fed through the map
    // it kept. The fixture was made from this very OUT.
    let partitioned = module("train_step_sharded.dedup.after_spmd");
    let fixture = std::fs::read_to_string(&partitioned).unwrap();
    assert!(fixture.contains("tessera.argument_map=\"0,1,0,2,2,3,4,0,4,2\""));
    let o = tessera(&["compare", &input, &partitioned, "--devices", "4"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("equivalent on 4 devices"), "{t}");
    // Without its map, the partitioned module's 5 parameters cannot take IN's 10 arguments.
    let bare = dir.join("bare.hlo");
    std::fs::write(
        &bare,
        fixture.replace(
            ", frontend_attributes={tessera.argument_map=\"0,1,0,2,2,3,4,0,4,2\"}",
            "",
        ),
    )
    .unwrap();
    let o = tessera(&["compare", &input, bare.to_str().unwrap(), "--devices", "4"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("takes 5 parameters, the original takes 10"),
        "{}",
        text(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
