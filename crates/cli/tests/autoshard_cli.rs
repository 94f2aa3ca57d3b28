//! `tessera auto-shard solve` on the contest's example: the solution file, the evaluator's cost
//! as the last line, and errors that name the file. `tessera compile --auto-shard` and
//! `tessera explain --auto-shard` on a module without shardings, and their refusals.

mod support;

use support::{repo, scratch, tessera};

fn example() -> String {
    repo()
        .join("passes/autoshard/testdata/example.json")
        .display()
        .to_string()
}

#[test]
fn solve_writes_the_solution_and_prints_the_cost_last() {
    let dir = scratch("autoshard-cli");
    let out_path = dir.join("solution.json");
    let out = tessera(&[
        "auto-shard",
        "solve",
        &example(),
        "--time-limit",
        "5",
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().last(), Some("cost 445"), "{stdout}");
    assert!(stdout.contains("optimal"), "{stdout}");
    let solution = std::fs::read_to_string(&out_path).unwrap();
    assert_eq!(solution.trim(), r#"{"solution":[0,0,2,1,0]}"#);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn solve_refuses_what_is_not_a_problem() {
    let out = tessera(&["auto-shard", "solve", "Cargo.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("Cargo.toml: not JSON"), "{err}");
    let out = tessera(&["auto-shard", "solve", &example(), "--time-limit", "0"]);
    assert_eq!(out.status.code(), Some(1));
}

/// A two-layer MLP without one sharding, for 8 devices.
const UNSHARDED: &str = r#"HloModule mlp, num_partitions=8

ENTRY main {
  x = f32[64,128]{1,0} parameter(0)
  w1 = f32[128,256]{1,0} parameter(1)
  w2 = f32[256,64]{1,0} parameter(2)
  h = f32[64,256]{1,0} dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  b = f32[64,256]{1,0} broadcast(z), dimensions={}
  r = f32[64,256]{1,0} maximum(h, b)
  y = f32[64,64]{1,0} dot(r, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[64,64]{1,0}, f32[64,256]{1,0}) tuple(y, r)
}
"#;

/// The module in a file of its own per test (tests run in parallel).
fn unsharded_file(name: &str) -> String {
    // Not the solve test's folder: it removes its own when done.
    let dir = scratch("auto-shard-cli");
    let p = dir.join(name);
    std::fs::write(&p, UNSHARDED).unwrap();
    p.display().to_string()
}

#[test]
fn compile_auto_shard_on_a_2d_mesh_verifies_and_reports_each_decision() {
    let f = unsharded_file("mlp_2d.hlo");
    let out = tessera(&[
        "compile",
        &f,
        "--auto-shard",
        "--mesh",
        "data=2,model=4",
        "--verify",
        "--report",
        "-o",
        "-",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for want in [
        "auto-sharding:",
        "mesh data=2,model=4:",
        "%h: {devices=",
        "runner-up",
        "equivalent on 8 devices",
    ] {
        assert!(err.contains(want), "{want:?} missing:\n{err}");
    }
    let program = String::from_utf8_lossy(&out.stdout);
    assert!(program.contains("parameter(0)"), "{program}");

    let out = tessera(&["explain", &f, "--auto-shard"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("bytes received per device"));
}

#[test]
fn compile_auto_shard_refuses_bad_meshes_and_impossible_limits() {
    let f = unsharded_file("mlp_refused.hlo");
    for (args, want) in [
        (
            vec!["--auto-shard", "--mesh", "data=2,model=2"],
            "--mesh `data=2,model=2`: its axes multiply to 4 devices",
        ),
        (
            vec!["--auto-shard", "--mesh", "data=0"],
            "expected a positive size, found 0",
        ),
        (vec!["--auto-shard", "--mesh", "data"], "expected NAME=SIZE"),
        (
            vec!["--mesh", "data=8"],
            "--mesh says how --auto-shard shards",
        ),
        (
            vec!["--auto-shard", "--memory-limit", "100"],
            "no sharding fits --memory-limit 100",
        ),
    ] {
        let mut a = vec!["compile", f.as_str(), "-o", "/dev/null"];
        a.extend(args.iter().copied());
        let out = tessera(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want:?} missing:\n{err}");
    }
}
