//! The runtime's variable store with deduplicated modules, on the PJRT CPU plugin:
//! device memory after placement, and a chained training loop.

use tessera_dedup::{deduplicate, DedupOptions};
use tessera_hlo::text::parse_module;
use tessera_runtime::harness::{self, random_inputs};
use tessera_runtime::variables::{
    compile_request, init_module_variables, module_binding, VariableKeys,
};
use tessera_runtime::{
    Client, ExecuteConfig, HostArray, HostValue, Plan, PlanInput, PlanStep, Runtime,
};

/// A step reading three variables through six arguments (w three times, m twice, s once),
/// with a plain input x.
const READS: &str = r#"
HloModule reads

ENTRY %main (w: f32[64,32], m: f32[32], x: f32[64,32], w2: f32[64,32], s: s32[8], m2: f32[32], w3: f32[64,32]) -> (f32[64,32], f32[32], s32[8]) {
  %w = f32[64,32]{1,0} parameter(0), frontend_attributes={tessera.resource="model/w"}
  %m = f32[32]{0} parameter(1), frontend_attributes={tessera.resource="model/m"}
  %x = f32[64,32]{1,0} parameter(2)
  %w2 = f32[64,32]{1,0} parameter(3), frontend_attributes={tessera.resource="model/w"}
  %s = s32[8]{0} parameter(4), frontend_attributes={tessera.resource="model/step"}
  %m2 = f32[32]{0} parameter(5), frontend_attributes={tessera.resource="model/m"}
  %w3 = f32[64,32]{1,0} parameter(6), frontend_attributes={tessera.resource="model/w"}
  %a = f32[64,32]{1,0} multiply(f32[64,32]{1,0} %w, f32[64,32]{1,0} %x)
  %b = f32[64,32]{1,0} add(f32[64,32]{1,0} %a, f32[64,32]{1,0} %w2)
  %c = f32[64,32]{1,0} subtract(f32[64,32]{1,0} %b, f32[64,32]{1,0} %w3)
  %mm = f32[32]{0} multiply(f32[32]{0} %m, f32[32]{0} %m2)
  %s2 = s32[8]{0} add(s32[8]{0} %s, s32[8]{0} %s)
  ROOT %r = (f32[64,32]{1,0}, f32[32]{0}, s32[8]{0}) tuple(f32[64,32]{1,0} %c, f32[32]{0} %mm, s32[8]{0} %s2)
}
"#;

fn arrays(values: Vec<HostValue>) -> Vec<HostArray> {
    values
        .into_iter()
        .map(|v| v.as_array().cloned().unwrap())
        .collect()
}

/// Placing the arguments: one device variable per argument slot without deduplication (as
/// seed 000 does by default), one per resource with it. Resident bytes differ by exactly the
/// removed duplicates' bytes (w twice: 2 x 8192, m once: 128), on every device; both runs give
/// the same outputs.
#[test]
fn memory_after_placement_drops_by_the_removed_duplicates() {
    let original = parse_module(READS).unwrap();
    let mut dedup = original.clone();
    let report = deduplicate(&mut dedup, &DedupOptions::default()).unwrap();
    assert_eq!(report.removed_bytes, 2 * 64 * 32 * 4 + 32 * 4);
    let values = arrays(random_inputs(&original, 7).unwrap());
    let x = values[2].clone();
    let devices = [0usize, 1];
    let mut resident = Vec::new();
    let mut outputs = Vec::new();
    for (m, keys) in [
        (&original, VariableKeys::PerArgument),
        (&dedup, VariableKeys::ByResource),
    ] {
        let rt = Runtime::new(Client::cpu(2).unwrap());
        let uploads = init_module_variables(&rt, m, keys, &values, &devices).unwrap();
        let per_device: Vec<u64> = devices
            .iter()
            .map(|&d| rt.memory_stats(d).unwrap().resident_bytes)
            .collect();
        assert_eq!(per_device[0], per_device[1]);
        resident.push((per_device[0], uploads));
        // Run on device 0 with the variables bound.
        let binding = module_binding(m, keys).unwrap();
        let exe = rt.compile(&compile_request(m).unwrap()).unwrap();
        let xh = rt
            .upload_bytes(
                0,
                &tessera_runtime::ArrayShape::new(
                    tessera_runtime::ElementType::F32,
                    x.dims.clone(),
                ),
                &x.data,
            )
            .unwrap();
        let outs = rt
            .execute_bound(
                exe,
                &binding,
                &[vec![xh]],
                ExecuteConfig {
                    explode_tuple: true,
                    ..Default::default()
                },
            )
            .unwrap();
        let got: Vec<Vec<u8>> = outs[0]
            .iter()
            .map(|&h| rt.download_bytes(h).unwrap().1)
            .collect();
        outputs.push(got);
    }
    let (without, uploads_without) = resident[0];
    let (with, uploads_with) = resident[1];
    assert_eq!(
        uploads_without,
        6 * 2,
        "one variable per argument slot and device"
    );
    assert_eq!(uploads_with, 3 * 2, "one variable per resource and device");
    assert_eq!(without - with, report.removed_bytes);
    assert_eq!(outputs[0], outputs[1]);
    // And both are what the original computes on its own.
    let expected = harness::run_original(
        &Client::cpu(1).unwrap(),
        &original,
        &random_inputs(&original, 7).unwrap(),
    )
    .unwrap();
    let expected: Vec<Vec<u8>> = expected.into_iter().map(|a| a.data).collect();
    assert_eq!(outputs[1], expected);
}

/// A training step: w is read through two arguments and written through output 0 (aliased);
/// the momentum m likewise through output 1; x is the batch.
const STEP: &str = r#"
HloModule step, input_output_alias={ {0}: (0, {}, may-alias), {1}: (3, {}, may-alias) }

ENTRY %main (w: f32[16,8], x: f32[16,8], w.read: f32[16,8], m: f32[16,8], m.read: f32[16,8]) -> (f32[16,8], f32[16,8], f32[]) {
  %w = f32[16,8]{1,0} parameter(0), frontend_attributes={tessera.resource="opt/w"}
  %x = f32[16,8]{1,0} parameter(1)
  %w.read = f32[16,8]{1,0} parameter(2), frontend_attributes={tessera.resource="opt/w"}
  %m = f32[16,8]{1,0} parameter(3), frontend_attributes={tessera.resource="opt/m"}
  %m.read = f32[16,8]{1,0} parameter(4), frontend_attributes={tessera.resource="opt/m"}
  %err = f32[16,8]{1,0} subtract(f32[16,8]{1,0} %w.read, f32[16,8]{1,0} %x)
  %half = f32[16,8]{1,0} constant({...})
  %g = f32[16,8]{1,0} multiply(f32[16,8]{1,0} %err, f32[16,8]{1,0} %half)
  %nine = f32[] constant(0.9)
  %b9 = f32[16,8]{1,0} broadcast(f32[] %nine), dimensions={}
  %mom = f32[16,8]{1,0} multiply(f32[16,8]{1,0} %m.read, f32[16,8]{1,0} %b9)
  %m.new = f32[16,8]{1,0} add(f32[16,8]{1,0} %mom, f32[16,8]{1,0} %g)
  %lr = f32[] constant(0.1)
  %blr = f32[16,8]{1,0} broadcast(f32[] %lr), dimensions={}
  %upd = f32[16,8]{1,0} multiply(f32[16,8]{1,0} %m.new, f32[16,8]{1,0} %blr)
  %w.new = f32[16,8]{1,0} subtract(f32[16,8]{1,0} %w, f32[16,8]{1,0} %upd)
  %sq = f32[16,8]{1,0} multiply(f32[16,8]{1,0} %err, f32[16,8]{1,0} %err)
  %zero = f32[] constant(0)
  %loss = f32[] reduce(f32[16,8]{1,0} %sq, f32[] %zero), dimensions={0,1}, to_apply=%sum
  ROOT %r = (f32[16,8]{1,0}, f32[16,8]{1,0}, f32[]) tuple(f32[16,8]{1,0} %w.new, f32[16,8]{1,0} %m.new, f32[] %loss)
}

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
"#;

fn step_text() -> String {
    // The constant 0.5 everywhere, written out (callees first, as XLA prints them).
    let half = vec!["{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}"; 16].join(", ");
    let text = STEP.replace("constant({...})", &format!("constant({{ {half} }})"));
    let (head, rest) = text.split_once("\nENTRY").unwrap();
    let (entry, sum) = rest.split_once("\n%sum").unwrap();
    format!("{head}\n%sum{sum}\nENTRY{entry}\n")
}

/// Ten chained steps: with deduplication the plan reads and writes the two variables in
/// place (each uploaded once, each step donating the old buffer), and ends with the values of
/// the same ten steps run without deduplication, each step fed its previous results.
#[test]
fn chained_training_loop_uploads_each_variable_once() {
    const STEPS: usize = 10;
    let original = parse_module(&step_text()).unwrap();
    let mut dedup = original.clone();
    let report = deduplicate(&mut dedup, &DedupOptions::default()).unwrap();
    assert_eq!(report.argument_map, vec![0, 1, 0, 2, 2]);
    let init = arrays(random_inputs(&original, 11).unwrap());
    let batches: Vec<HostArray> = (0..STEPS)
        .map(|k| arrays(random_inputs(&original, 100 + k as u64).unwrap())[1].clone())
        .collect();

    // Without deduplication: the original, its arguments from the host every step.
    let client = Client::cpu(1).unwrap();
    let (mut w, mut m) = (init[0].clone(), init[3].clone());
    let mut losses = Vec::new();
    for x in &batches {
        let args = [&w, x, &w, &m, &m].map(|a| HostValue::Array(a.clone()));
        let outs = harness::run_original(&client, &original, &args).unwrap();
        w = outs[0].clone();
        m = outs[1].clone();
        losses.push(outs[2].clone());
    }

    // With deduplication: variables in the store, a plan of ten steps.
    let rt = Runtime::new(client.clone());
    let uploads =
        init_module_variables(&rt, &dedup, VariableKeys::ByResource, &init, &[0]).unwrap();
    assert_eq!(uploads, 2);
    let binding = module_binding(&dedup, VariableKeys::ByResource).unwrap();
    let exe = rt.compile(&compile_request(&dedup).unwrap()).unwrap();
    let shape = tessera_runtime::ArrayShape::new(tessera_runtime::ElementType::F32, vec![16, 8]);
    let xs: Vec<_> = batches
        .iter()
        .map(|x| rt.upload_bytes(0, &shape, &x.data).unwrap())
        .collect();
    let inputs: Vec<PlanInput> = binding
        .params
        .iter()
        .map(|p| match *p {
            tessera_runtime::ParamSource::Variable(fp) => PlanInput::Variable(fp),
            tessera_runtime::ParamSource::Argument(_) => PlanInput::Handle(xs[0]),
        })
        .collect();
    let steps = (0..STEPS)
        .map(|k| PlanStep {
            executable: exe,
            args: vec![inputs
                .iter()
                .map(|i| match i {
                    PlanInput::Handle(_) => PlanInput::Handle(xs[k]),
                    other => *other,
                })
                .collect()],
        })
        .collect();
    let plan = Plan {
        steps,
        outputs: (0..STEPS).map(|k| (k, 2)).collect(),
    };
    let donated_before = rt.memory_stats(0).unwrap().donated;
    let kept = rt.execute_plan(&plan).unwrap();
    assert_eq!(rt.variable_uploads(), 2, "each variable uploaded once");
    assert_eq!(
        rt.memory_stats(0).unwrap().donated - donated_before,
        2 * STEPS as u64,
        "both variables updated in place at every step"
    );
    let fp = |name: &str| tessera_hlo::resource::ResourceId::new("opt", name).fingerprint();
    assert_eq!(rt.read_variable(fp("w"), 0).unwrap().1, w.data);
    assert_eq!(rt.read_variable(fp("m"), 0).unwrap().1, m.data);
    for (k, h) in kept.iter().enumerate() {
        assert_eq!(
            rt.download_bytes(h[0]).unwrap().1,
            losses[k].data,
            "loss {k}"
        );
    }
    // Only the two variables, the batches and the kept losses are alive.
    assert_eq!(rt.live_buffers(), 2 + STEPS + STEPS);
}
