//! The consuming library's side of a scenario: make keepalloc-kernels allocate, compute and
//! free through the table it captured, and check the answers.

use keepalloc_kernels::{
    FullyConnected, FullyConnectedDesc, KernelError, LOW_PRECISION_ALLOCATIONS, low_precision_path,
};

/// Layer shapes of the path: (input channels, output channels). Odd sizes, so the kernels'
/// edge tiles run too.
pub const LAYERS: [(usize, usize); 3] = [(37, 29), (29, 48), (48, 7)];

/// Rows per batch.
pub const BATCH: usize = 3;

/// Allocation calls one [`run_path`] makes through the captured table (each f32 layer's
/// `create` makes [`FullyConnected::CREATE_ALLOCATIONS`], and the bf16, qd8 and qc8w
/// operators [`LOW_PRECISION_ALLOCATIONS`] between them): the allocation sites an
/// out-of-memory plan fails in turn.
pub const PATH_ALLOCATIONS: usize =
    LAYERS.len() * FullyConnected::CREATE_ALLOCATIONS + LOW_PRECISION_ALLOCATIONS;

/// `n` deterministic values in [-1, 1) from ChaCha8 stream `stream` of a fixed seed.
pub(crate) fn values(stream: u64, n: usize) -> Vec<f32> {
    use rand::Rng;
    let mut rng = crate::seeds::stream(0x6b61_6c6c, stream);
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn weights(layer: usize) -> (Vec<f32>, Vec<f32>) {
    let (k, n) = LAYERS[layer];
    (
        values(2 * layer as u64, k * n),
        values(2 * layer as u64 + 1, n),
    )
}

fn input() -> Vec<f32> {
    values(99, BATCH * LAYERS[0].0)
}

/// `clamp(x·Wᵀ + b, -4, 4)` in plain scalar Rust: the reference answer.
fn reference(layer: usize, x: &[f32]) -> Vec<f32> {
    let (k, n) = LAYERS[layer];
    let (w, b) = weights(layer);
    let mut y = vec![0.0f32; BATCH * n];
    for m in 0..BATCH {
        for j in 0..n {
            let dot: f32 = (0..k).map(|i| x[m * k + i] * w[j * k + i]).sum();
            y[m * n + j] = (dot + b[j]).clamp(-4.0, 4.0);
        }
    }
    y
}

/// Runs the whole path through the table the library captured: creates every layer
/// (each packs its weights into a block from the table), runs the batch through all of
/// them, then drops them (each frees its block through the table). Returns the output, or
/// the first error; on error every block already taken has been given back.
pub fn run_path() -> Result<Vec<f32>, KernelError> {
    let mut ops = Vec::with_capacity(LAYERS.len());
    for (layer, &(k, n)) in LAYERS.iter().enumerate() {
        let (w, b) = weights(layer);
        let desc = FullyConnectedDesc::new(k, n, &w)
            .with_bias(&b)
            .with_range(-4.0, 4.0);
        ops.push(FullyConnected::create(&desc)?);
    }
    // The low-precision operators (bf16_f32, qd8_f32_qc8w, f32_qc8w): each created through
    // the captured table, run, checked against its reference and dropped.
    let low_precision_right = low_precision_path()?;
    let mut x = input();
    for (op, &(_, n)) in ops.iter().zip(&LAYERS) {
        let mut y = vec![0.0f32; BATCH * n];
        op.run(BATCH, &x, &mut y)?;
        x = y;
    }
    drop(ops);
    if !low_precision_right {
        // A wrong low-precision answer makes the whole path's answer wrong (`close` fails).
        x.fill(f32::NAN);
    }
    Ok(x)
}

/// The reference output of [`run_path`].
pub fn expected_path() -> Vec<f32> {
    let mut x = input();
    for layer in 0..LAYERS.len() {
        x = reference(layer, &x);
    }
    x
}

/// True when `got` matches `want` to within float reassociation error.
pub fn close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-4 * (1.0 + w.abs()))
}

/// Makes the library allocate, compute and free through the context it captured, and
/// checks the answer: `Err` says what went wrong (a memory violation on the way ends the
/// process before this returns, under [`Policy::Abort`](crate::Policy::Abort)).
pub fn library_works() -> Result<(), String> {
    let got = run_path().map_err(|e| format!("the library failed: {e}"))?;
    if close(&got, &expected_path()) {
        Ok(())
    } else {
        Err("the library computed a wrong answer".to_string())
    }
}
