//! `tessera auto-shard solve` on the contest's example: the solution file, the evaluator's cost
//! as the last line, and errors that name the file.

use std::path::Path;
use std::process::Command;

fn tessera(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("runs tessera")
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../passes/autoshard/testdata/example.json")
        .display()
        .to_string()
}

#[test]
fn solve_writes_the_solution_and_prints_the_cost_last() {
    let dir = std::env::temp_dir().join(format!("tessera-autoshard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
