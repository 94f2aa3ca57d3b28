//! The device variable store (seed 000's TPU variables over seed 002's handles) on the real
//! CPU plugin: initialised once per device, bound to parameters through an argument map,
//! updated in place through aliases by `execute_bound` and by plans, and every misuse refused.

use tessera_runtime::{
    ArrayShape, Client, CompileOptions, CompileRequest, ElementType, Error, ExecuteConfig,
    ParamSource, Plan, PlanInput, PlanStep, Program, Runtime, VariableBinding,
};

/// `(v, x) -> v * x`, with v at parameter 0.
fn mul(n: usize) -> Program {
    Program::mlir(format!(
        "func.func @main(%v: tensor<{n}xf32>, %x: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n  %0 = stablehlo.multiply %v, %x : tensor<{n}xf32>\n  return %0 : tensor<{n}xf32>\n}}"
    ))
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

const V: u64 = 0x1234;

#[test]
fn binding_through_an_argument_map() {
    // Arguments 0 and 2 are variable V, 1 and 3 plain; map 0,1,0,2.
    let b = VariableBinding::through_map(&[Some(V), None, Some(V), None], &[0, 1, 0, 2]).unwrap();
    assert_eq!(
        b.params,
        vec![
            ParamSource::Variable(V),
            ParamSource::Argument(0),
            ParamSource::Argument(1)
        ]
    );
    assert_eq!(b.num_arguments(), 2);
    let e = VariableBinding::through_map(&[Some(V), Some(7)], &[0, 0]).unwrap_err();
    assert!(
        e.to_string()
            .contains("arguments 0 and 1 go to parameter 0 but are not the same variable"),
        "{e}"
    );
    let e = VariableBinding::through_map(&[None, None], &[0, 2]).unwrap_err();
    assert!(
        e.to_string().contains("no argument goes to parameter 1"),
        "{e}"
    );
    assert!(VariableBinding::through_map(&[None], &[0, 1]).is_err());
}

#[test]
fn variables_live_once_per_device_and_update_in_place() {
    let rt = Runtime::new(Client::cpu(2).unwrap());
    let shape = ArrayShape::new(ElementType::F32, vec![4]);
    let v0 = bytes(&[1.0, 2.0, 3.0, 4.0]);
    assert!(rt.init_variable(V, 0, &shape, &v0).unwrap());
    // Seen ordinal: no second upload, the value stays.
    assert!(!rt.init_variable(V, 0, &shape, &bytes(&[9.0; 4])).unwrap());
    assert!(rt.init_variable(V, 1, &shape, &v0).unwrap());
    assert_eq!(rt.variable_uploads(), 2);
    assert_eq!(rt.variable_count(), 2);
    assert_eq!(rt.memory_stats(0).unwrap().resident_bytes, 16);

    // v <- v * x, aliased: the variable is updated in place on device 0.
    let exe = rt
        .compile(&CompileRequest::new(mul(4), CompileOptions::default()).with_aliases(&[(0, 0)]))
        .unwrap();
    let binding = VariableBinding {
        params: vec![ParamSource::Variable(V), ParamSource::Argument(0)],
    };
    let x = rt.upload::<f32>(0, &[2.0, 2.0, 2.0, 2.0], &[4]).unwrap();
    let config = ExecuteConfig {
        explode_tuple: true,
        ..Default::default()
    };
    for _ in 0..3 {
        let out = rt.execute_bound(exe, &binding, &[vec![x]], config).unwrap();
        // The caller's reference to the output; the store keeps its own.
        rt.release(out[0][0]).unwrap();
    }
    assert_eq!(
        floats(&rt.read_variable(V, 0).unwrap().1),
        vec![8.0, 16.0, 24.0, 32.0]
    );
    // Device 1's copy is untouched; three donations, no growth.
    assert_eq!(
        floats(&rt.read_variable(V, 1).unwrap().1),
        vec![1.0, 2.0, 3.0, 4.0]
    );
    assert_eq!(rt.memory_stats(0).unwrap().donated, 3);
    assert_eq!(rt.memory_stats(0).unwrap().resident_bytes, 32);
    assert_eq!(rt.variable_uploads(), 2);

    // A plan of two steps reads and writes the variable; the intermediate goes to the store.
    let step = PlanStep {
        executable: exe,
        args: vec![vec![PlanInput::Variable(V), PlanInput::Handle(x)]],
    };
    let kept = rt
        .execute_plan(&Plan {
            steps: vec![step.clone(), step],
            outputs: vec![],
        })
        .unwrap();
    assert!(kept.is_empty());
    assert_eq!(
        floats(&rt.read_variable(V, 0).unwrap().1),
        vec![32.0, 64.0, 96.0, 128.0]
    );
    assert_eq!(rt.memory_stats(0).unwrap().donated, 5);
    assert_eq!(rt.live_buffers(), 3, "two variables and x");

    rt.release_variable(V).unwrap();
    assert_eq!(rt.variable_count(), 0);
    assert_eq!(rt.memory_stats(1).unwrap().resident_bytes, 0);
}

#[test]
fn misuse_is_refused() {
    let rt = Runtime::new(Client::cpu(1).unwrap());
    let exe = rt
        .compile(&CompileRequest::new(mul(4), CompileOptions::default()).with_aliases(&[(0, 0)]))
        .unwrap();
    let x = rt.upload::<f32>(0, &[2.0; 4], &[4]).unwrap();
    let config = ExecuteConfig::default();
    let binding = VariableBinding {
        params: vec![ParamSource::Variable(V), ParamSource::Argument(0)],
    };
    // Not initialised.
    let e = rt
        .execute_bound(exe, &binding, &[vec![x]], config)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("variable 0x0000000000001234 is not initialised on device index 0"),
        "{e}"
    );
    let shape = ArrayShape::new(ElementType::F32, vec![4]);
    rt.init_variable(V, 0, &shape, &bytes(&[1.0; 4])).unwrap();
    // Wrong binding length, missing plain argument.
    let short = VariableBinding {
        params: vec![ParamSource::Variable(V)],
    };
    assert!(matches!(
        rt.execute_bound(exe, &short, &[vec![x]], config),
        Err(Error::InvalidArgument(_))
    ));
    assert!(rt.execute_bound(exe, &binding, &[vec![]], config).is_err());
    // A variable of the wrong shape is refused by the execution's shape check.
    rt.init_variable(
        7,
        0,
        &ArrayShape::new(ElementType::F32, vec![3]),
        &bytes(&[1.0; 3]),
    )
    .unwrap();
    let wrong = VariableBinding {
        params: vec![ParamSource::Variable(7), ParamSource::Argument(0)],
    };
    assert!(rt.execute_bound(exe, &wrong, &[vec![x]], config).is_err());
    // Nothing changed: V still holds its value, nothing leaked.
    assert_eq!(floats(&rt.read_variable(V, 0).unwrap().1), vec![1.0; 4]);
    assert_eq!(rt.live_buffers(), 3);
    // A plan step on a variable that is not there.
    let e = rt
        .execute_plan(&Plan {
            steps: vec![PlanStep {
                executable: exe,
                args: vec![vec![PlanInput::Variable(99), PlanInput::Handle(x)]],
            }],
            outputs: vec![],
        })
        .unwrap_err();
    assert!(e.to_string().contains("not initialised"), "{e}");
}
