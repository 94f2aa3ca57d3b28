//! Shared by the executed property tests: the PJRT client, a deterministic generator and
//! random shardings as text.

use std::sync::OnceLock;

use tessera_runtime::harness;
use tessera_runtime::Client;

pub fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::cpu(8).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
    })
}

/// The harness's deterministic generator, drawing below a bound.
pub struct Gen(pub harness::Rng);
impl Gen {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
}

/// A random sharding of a rank-`rank` array on `n` devices, as text.
pub fn random_sharding(g: &mut Gen, rank: usize, n: i64) -> String {
    match g.below(14) {
        0 => return format!("{{maximal device={}}}", g.below(n as u64)),
        1 => return "{replicated}".to_string(),
        _ => {}
    }
    let mut tiles = vec![1i64; rank];
    let mut repl = 1;
    let mut left = n;
    while left > 1 {
        let slot = g.below(rank as u64 + 1) as usize;
        if slot == rank {
            repl *= 2;
        } else {
            tiles[slot] *= 2;
        }
        left /= 2;
    }
    let mut dims: Vec<String> = tiles.iter().map(i64::to_string).collect();
    if repl > 1 {
        dims.push(repl.to_string());
    }
    let suffix = if repl > 1 {
        " last_tile_dim_replicate"
    } else {
        ""
    };
    let devices = match g.below(3) {
        0 => format!("<=[{n}]"),
        // A device mesh read in transposed order: [a, n/a] T(1,0).
        1 if n >= 4 => format!("<=[2,{}]T(1,0)", n / 2),
        _ => {
            let mut d: Vec<i64> = (0..n).collect();
            for i in (1..d.len()).rev() {
                let j = g.below(i as u64 + 1) as usize;
                d.swap(i, j);
            }
            d.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
        }
    };
    format!("{{devices=[{}]{devices}{suffix}}}", dims.join(","))
}
