use tessera_hlo::text::parse_module;
use tessera_runtime::harness::{self, check_equivalence, CompareOptions};
use tessera_runtime::Client;
fn main() {
    let a = std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap();
    let b = std::fs::read_to_string(std::env::args().nth(2).unwrap()).unwrap();
    let n: usize = std::env::args().nth(3).unwrap().parse().unwrap();
    let (a, b) = (parse_module(&a).unwrap(), parse_module(&b).unwrap());
    let c = Client::cpu(8).unwrap();
    let inputs = harness::random_inputs(&a, 1).unwrap();
    let r = check_equivalence(&c, &a, &b, n, &inputs, CompareOptions::default()).unwrap();
    for o in &r.outputs {
        println!("{o}");
    }
}
