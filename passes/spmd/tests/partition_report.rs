//! The partitioner's report, its options and its errors on bad input.

use tessera_hlo::text::parse_module;
use tessera_pass::options::PassOptions;
use tessera_pass::Pass;
use tessera_spmd::{SpmdOptions, SpmdPartitioning};

fn run(text: &str) -> Result<SpmdPartitioning, String> {
    let mut m = parse_module(text).map_err(|e| e.to_string())?;
    let mut p = SpmdPartitioning::default();
    p.run(&mut m).map_err(|e| e.to_string())?;
    Ok(p)
}

#[test]
fn report_names_each_collective_with_its_cause_and_bytes() {
    let p = run(r#"HloModule m, num_partitions=4
ENTRY %main (p: f32[8,8]) -> f32[8,8] {
  %p = f32[8,8] parameter(0), sharding={devices=[2,2]<=[4]}
  ROOT %c = f32[8,8] copy(%p), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
}"#)
    .unwrap();
    let r = &p.report;
    assert_eq!(r.collectives.len(), 1);
    let c = &r.collectives[0];
    assert_eq!((c.collective, c.original.as_str()), ("all-gather", "c"));
    // The output piece is f32[4,8] (128 bytes); half of it arrives from the other device.
    assert_eq!(c.bytes, 64);
    assert!(r.last_resorts.is_empty());
    let text = r.explain();
    assert!(text.contains("all-gather for %c"), "{text}");
    assert!(text.contains("%p: 256"), "{text}");
    assert!(text.contains("%p: 64"), "{text}");
}

#[test]
fn last_resorts_are_reported() {
    let p = run(r#"HloModule m, num_partitions=4
ENTRY %main (p: s32[8,6]) -> s32[8,6] {
  %p = s32[8,6] parameter(0), sharding={devices=[2,2]3,0,2,1}
  ROOT %c = s32[8,6] copy(%p), sharding={devices=[1,4]1,3,0,2}
}"#)
    .unwrap();
    assert_eq!(p.report.last_resorts.len(), 1, "{:?}", p.report);
    assert!(p.report.last_resorts[0].starts_with("%c:"));
}

#[test]
fn options_are_checked() {
    let pairs = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
    let o = SpmdOptions::from_pairs("spmd-partitioning", &pairs("num_partitions", "8")).unwrap();
    assert_eq!(o.num_partitions, 8);
    let e = SpmdOptions::from_pairs("spmd-partitioning", &pairs("num_partitions", "-2"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("num_partitions=-2"), "{e}");
    let e = SpmdOptions::from_pairs("spmd-partitioning", &pairs("bogus", "1"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("known:"), "{e}");
}

#[test]
fn bad_shardings_are_errors_that_name_the_instruction() {
    // A tiling of rank 3 on a rank-2 array.
    let e = run(r#"HloModule m, num_partitions=4
ENTRY %main (p: f32[8,8]) -> f32[8,8] {
  %p = f32[8,8] parameter(0), sharding={devices=[2,2]<=[4]}
  ROOT %c = f32[8,8] copy(%p), sharding={devices=[2,1,2]<=[4]}
}"#)
    .unwrap_err();
    assert!(e.contains("%c") && e.contains("rank 2"), "{e}");
    // A tiling over 8 devices in a 4-partition module.
    let e = run(r#"HloModule m, num_partitions=4
ENTRY %main (p: f32[8,8]) -> f32[8,8] {
  ROOT %p = f32[8,8] parameter(0), sharding={devices=[4,2]<=[8]}
}"#)
    .unwrap_err();
    assert!(e.contains("%p") && e.contains("8 devices"), "{e}");
    // Partition id outside a manual region.
    let e = run(r#"HloModule m, num_partitions=2
ENTRY %main () -> u32[] {
  ROOT %id = u32[] partition-id(), sharding={replicated}
}"#)
    .unwrap_err();
    assert!(e.contains("%id") && e.contains("manual"), "{e}");
    // No partitions.
    let e = run("HloModule m, num_partitions=0\nENTRY %main () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}").unwrap_err();
    assert!(e.contains("num_partitions"), "{e}");
}

#[test]
fn unsupported_partitioned_forms_are_errors_that_name_the_instruction() {
    // SPMDFullToShardShape whose operand has the right piece shapes but not the right
    // placement: the operand splits rows over {0,1} and {2,3}, the region's subgroups
    // ({0,2} and {1,3}, rows split inside) need rows over {0,2} and {1,3}.
    let e = run(r#"HloModule m, num_partitions=4
ENTRY %main (p: f32[4,2]) -> f32[4,2] {
  %p = f32[4,2] parameter(0), sharding={devices=[2,2]0,2,1,3}
  %m = f32[4,1] custom-call(%p), custom_call_target="SPMDFullToShardShape", sharding={devices=[2,1,2]<=[4] last_tile_dims={manual}}
  ROOT %f = f32[4,2] custom-call(%m), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,2]<=[4]}
}"#)
    .unwrap_err();
    assert!(e.contains("%m") && e.contains("place"), "{e}");
    // XLA SubgroupIllegalManualAllReduce: inside a partially manual region an all-reduce over
    // devices of one manual subgroup ({0,2} hold different pieces of group 0's value).
    let e = run(r#"HloModule m, num_partitions=4
%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}
ENTRY %main (p: f32[4,2]) -> f32[4,2] {
  %p = f32[4,2] parameter(0), sharding={devices=[2,2]<=[4]}
  %m = f32[4,1] custom-call(%p), custom_call_target="SPMDFullToShardShape", sharding={devices=[2,1,2]<=[4] last_tile_dims={manual}}
  %ar = f32[4,1] all-reduce(%m), channel_id=1, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=%sum, sharding={devices=[2,1,2]<=[4] last_tile_dims={manual}}
  ROOT %f = f32[4,2] custom-call(%ar), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,2]<=[4]}
}"#)
    .unwrap_err();
    assert!(e.contains("%ar") && e.contains("same piece"), "{e}");
    // An outfeed with one leaf on a single device and another split (XLA does not partition
    // it either; infeeds and outfeeds wholly on one device, or with pieces of unequal size,
    // are partitioned: testdata/spmd-partitioning/{infeed,outfeed}-*.hlo).
    let e = run(r#"HloModule m, num_partitions=2
ENTRY %main (p: f32[8], q: f32[8]) -> token[] {
  %t = token[] after-all()
  %p = f32[8] parameter(0), sharding={maximal device=0}
  %q = f32[8] parameter(1), sharding={devices=[2]<=[2]}
  %d = (f32[8], f32[8]) tuple(%p, %q), sharding={{maximal device=0}, {devices=[2]<=[2]}}
  ROOT %o = token[] outfeed(%d, %t), sharding={{maximal device=0}, {devices=[2]<=[2]}}
}"#)
    .unwrap_err();
    assert!(e.contains("%o") && e.contains("single devices"), "{e}");
}

#[test]
fn replicas_and_signature_options_are_read() {
    let pairs = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
    let o = SpmdOptions::from_pairs("spmd-partitioning", &pairs("num_replicas", "2")).unwrap();
    assert_eq!(o.num_replicas, 2);
    assert!(SpmdOptions::default().allow_module_signature_change);
    let text = r#"HloModule m, num_partitions=2
ENTRY %main (p: f32[8,2]) -> f32[8,2] {
  %p = f32[8,2] parameter(0), sharding={devices=[2,1]<=[2]}
  ROOT %n = f32[8,2] negate(%p), sharding={devices=[2,1]<=[2]}
}"#;
    // Signature kept: whole parameter and result, replicated at the boundary.
    let mut m = parse_module(text).unwrap();
    let mut p = SpmdPartitioning::default();
    p.options.allow_module_signature_change = false;
    p.options.num_replicas = 2;
    p.run(&mut m).unwrap();
    let e = m.entry().unwrap();
    let ps = m.program_shape(e);
    assert_eq!(ps.parameters[0].dims(), &[8, 2]);
    assert_eq!(ps.result.dims(), &[8, 2]);
    assert_eq!(m.config.replica_count, 2);
    // Every emitted group is repeated per replica: the all-gather of the result spans
    // devices {0,1} and {2,3}.
    let printed = tessera_hlo::text::print_module(&m, &Default::default());
    assert!(
        printed.contains("replica_groups={{0,1},{2,3}}"),
        "{printed}"
    );
    // Signature changed (the default): the pieces.
    let mut m = parse_module(text).unwrap();
    SpmdPartitioning::default().run(&mut m).unwrap();
    let ps = m.program_shape(m.entry().unwrap());
    assert_eq!(ps.parameters[0].dims(), &[4, 2]);
    assert_eq!(ps.result.dims(), &[4, 2]);
}

#[test]
fn windowed_einsum_options_and_report() {
    let pairs = |kv: &[(&str, &str)]| -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let o = SpmdOptions::from_pairs(
        "spmd-partitioning",
        &pairs(&[
            ("threshold_for_windowed_einsum_mib", "0"),
            ("max_windowed_einsum_iteration", "4"),
            ("unroll_windowed_einsum", "true"),
            ("bidirectional_windowed_einsum", "true"),
            ("windowed_einsum_use_multiple_streams", "true"),
        ]),
    )
    .unwrap();
    assert_eq!(o.threshold_for_windowed_einsum_mib, 0);
    assert_eq!(o.max_windowed_einsum_iteration, 4);
    assert!(o.unroll_windowed_einsum && o.bidirectional_windowed_einsum);
    for (k, v) in [
        ("max_windowed_einsum_iteration", "-1"),
        ("unroll_windowed_einsum", "maybe"),
        ("threshold_for_windowed_einsum_mib", "x"),
    ] {
        let e = SpmdOptions::from_pairs("spmd-partitioning", &pairs(&[(k, v)]));
        assert!(e.is_err(), "{k}={v} was accepted");
    }
    // The loop is reported as one collective-permute line with the bytes of all its steps:
    // three steps of an f32[2,8] rhs piece (64 bytes).
    let text = r#"HloModule m, num_partitions=4
ENTRY %main (x: f32[8,8], w: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8] parameter(0), sharding={devices=[4,1]<=[4]}
  %w = f32[8,8] parameter(1), sharding={devices=[4,1]<=[4]}
  ROOT %d = f32[8,8] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}, sharding={devices=[4,1]<=[4]}
}"#;
    let mut m = parse_module(text).unwrap();
    let mut p = SpmdPartitioning::default();
    p.options.threshold_for_windowed_einsum_mib = 0;
    p.run(&mut m).unwrap();
    let c = &p.report.collectives;
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].collective, c[0].original.as_str()),
        ("collective-permute", "d")
    );
    assert!(
        c[0].reason.starts_with("windowed einsum"),
        "{}",
        c[0].reason
    );
    assert_eq!(c[0].bytes, 3 * 64);
    // The loop is a candidate of the dot's cost model: the choice names it, its bytes and
    // peak, and the runner-up (gathering the rhs: the same bytes, a larger peak).
    let choice = &p.report.choices[0];
    assert!(
        choice.starts_with("%d: windowed einsum: rhs pieces")
            && choice.contains("(192 bytes received per device, peak 256 bytes;")
            && choice.contains("; next: ")
            && choice.contains("192 bytes, peak 384)"),
        "{choice}"
    );
    // The default threshold leaves the same dot to the all-gather.
    let p = run(text).unwrap();
    assert_eq!(p.report.collectives[0].collective, "all-gather");
}
