//! Partitioned `rng`, executed on 8 PJRT CPU devices. A stateful rng is drawn per device
//! where its result is tiled (as XLA's partitioner does), so the numbers cannot equal what
//! one device draws for the whole array (that differs on every run too): this test checks
//! what can be checked instead: the shapes, that every value lies in the requested range,
//! that the devices' pieces differ (independent streams, not one stream repeated), and that
//! devices holding the same piece agree. The filetests `rng-*.hlo` run through
//! `partition_exec` with one-value ranges, where equality with one device does hold.

mod common;

use common::{client, partition_batch};
use tessera_runtime::{harness, Scalar};

const MODULE: &str = "HloModule rng_wide, num_partitions=8

ENTRY %main () -> (s32[64], f32[32]) {
  %lo = s32[] constant(-1000000), sharding={replicated}
  %hi = s32[] constant(1000000), sharding={replicated}
  %r = s32[64]{0} rng(%lo, %hi), distribution=rng_uniform, sharding={devices=[8]<=[8]}
  %a = f32[] constant(2), sharding={replicated}
  %b = f32[] constant(3), sharding={replicated}
  %u = f32[32]{0} rng(%a, %b), distribution=rng_uniform, sharding={devices=[2,4]<=[8] last_tile_dim_replicate}
  ROOT %t = (s32[64], f32[32]) tuple(%r, %u), sharding={{devices=[8]<=[8]}, {devices=[2,4]<=[8] last_tile_dim_replicate}}
}
";

#[test]
fn tiled_rng_draws_per_device_in_range_and_replicas_agree() {
    let (original, part, report) = partition_batch(MODULE);
    // The tiled rng moves nothing; the partially replicated one sums each group's first draw.
    let notes: Vec<_> = report.collectives.iter().map(|c| c.collective).collect();
    assert_eq!(notes, vec!["all-reduce"], "{:?}", report.collectives);
    let out = harness::run_partitioned(client(), &original, &part, 8, &[]).unwrap();
    assert_eq!(out.len(), 2);
    for (k, a) in out.iter().enumerate() {
        assert_eq!(
            a.mismatch_count, 0,
            "output {k}: replicas disagree: {:?}",
            a.mismatches
        );
    }
    let ints = out[0].value.as_array().unwrap();
    assert_eq!(ints.dims, vec![64]);
    let v: Vec<i128> = (0..64)
        .map(|k| match ints.get(k) {
            Scalar::Int(i) => i,
            s => panic!("not an integer: {s}"),
        })
        .collect();
    assert!(
        v.iter().all(|x| (-1_000_000..1_000_000).contains(x)),
        "{v:?}"
    );
    let pieces: Vec<&[i128]> = v.chunks(8).collect();
    for i in 0..8 {
        for j in i + 1..8 {
            assert_ne!(
                pieces[i], pieces[j],
                "devices {i} and {j} drew the same piece"
            );
        }
    }
    let floats = out[1].value.as_array().unwrap().to_f32().unwrap();
    assert_eq!(floats.len(), 32);
    assert!(floats.iter().all(|x| (2.0..3.0).contains(x)), "{floats:?}");
    assert_ne!(
        floats[..16],
        floats[16..],
        "the two halves are the same draw"
    );
}
