//! Target `kernels`: keepalloc's own operators through the table, as a runtime drives them:
//! the f32, bf16, qd8 and f32_qc8w fully-connected operators created, run on the calling
//! thread and on a two-thread pool, and dropped. Each output is compared with the same
//! operator's output on a plain `System` table (no failure can reach that one): they must
//! be bit-identical. The first error stops the run, and everything built is dropped.

use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_kernels::{
    FullyConnected, FullyConnectedBf16F32, FullyConnectedBf16F32Desc, FullyConnectedDesc,
    FullyConnectedF32Qc8w, FullyConnectedF32Qc8wDesc, FullyConnectedQd8F32Qc8w,
    FullyConnectedQd8F32Qc8wDesc, KernelError, ThreadPool, bf16_from_f32,
};

use super::Outcome;

static PLAIN: AllocatorTable = AllocatorTable::for_allocator(&System);

const M: usize = 37;
const K: usize = 96;
const N: usize = 70;

struct Data {
    x: Vec<f32>,
    xb: Vec<u16>,
    w: Vec<f32>,
    wb: Vec<u16>,
    w8: Vec<i8>,
    scales: Vec<f32>,
    bias: Vec<f32>,
}

fn data() -> Data {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut unit = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let x: Vec<f32> = (0..M * K).map(|_| unit()).collect();
    let w: Vec<f32> = (0..N * K).map(|_| unit()).collect();
    Data {
        xb: x.iter().map(|&v| bf16_from_f32(v)).collect(),
        wb: w.iter().map(|&v| bf16_from_f32(v)).collect(),
        w8: w.iter().map(|&v| (v * 127.0) as i8).collect(),
        scales: (0..N).map(|i| 0.01 + i as f32 * 1e-4).collect(),
        bias: (0..N).map(|_| unit()).collect(),
        x,
        w,
    }
}

/// One operator's outputs: on `table` on the calling thread, then on `pool` if there is one.
type Runs = Result<(Vec<f32>, Option<Vec<f32>>), KernelError>;

fn f32_op(t: &'static AllocatorTable, d: &Data, pool: Option<&ThreadPool>) -> Runs {
    let op = FullyConnected::create_with_table(
        t,
        &FullyConnectedDesc::new(K, N, &d.w).with_bias(&d.bias),
    )?;
    runs(pool, |out, p| match p {
        Some(p) => op.run_in(p, M, &d.x, out),
        None => op.run(M, &d.x, out),
    })
}

fn bf16_op(t: &'static AllocatorTable, d: &Data, pool: Option<&ThreadPool>) -> Runs {
    let desc = FullyConnectedBf16F32Desc::new(K, N, &d.wb).with_bias(&d.bias);
    let op = FullyConnectedBf16F32::create_with_table(t, &desc)?;
    runs(pool, |out, p| match p {
        Some(p) => op.run_in(p, M, &d.xb, out),
        None => op.run(M, &d.xb, out),
    })
}

fn qd8_op(t: &'static AllocatorTable, d: &Data, pool: Option<&ThreadPool>) -> Runs {
    let desc = FullyConnectedQd8F32Qc8wDesc::new(K, N, &d.w8, &d.scales).with_bias(&d.bias);
    let op = FullyConnectedQd8F32Qc8w::create_with_table(t, &desc)?;
    let mut ws = vec![0u8; op.workspace_size(M)?];
    runs(pool, |out, p| match p {
        Some(p) => op.run_in(p, M, &d.x, out, &mut ws),
        None => op.run(M, &d.x, out, &mut ws),
    })
}

fn qc8w_op(t: &'static AllocatorTable, d: &Data, pool: Option<&ThreadPool>) -> Runs {
    let desc = FullyConnectedF32Qc8wDesc::new(K, N, &d.w8, &d.scales).with_bias(&d.bias);
    let op = FullyConnectedF32Qc8w::create_with_table(t, &desc)?;
    runs(pool, |out, p| match p {
        Some(p) => op.run_in(p, M, &d.x, out),
        None => op.run(M, &d.x, out),
    })
}

/// The output of `run` on the calling thread, then on `pool` if there is one.
fn runs(
    pool: Option<&ThreadPool>,
    mut run: impl FnMut(&mut [f32], Option<&ThreadPool>) -> Result<(), KernelError>,
) -> Runs {
    let mut y = vec![0.0; M * N];
    run(&mut y, None)?;
    let z = match pool {
        Some(p) => {
            let mut z = vec![0.0; M * N];
            run(&mut z, Some(p))?;
            Some(z)
        }
        None => None,
    };
    Ok((y, z))
}

type Op = fn(&'static AllocatorTable, &Data, Option<&ThreadPool>) -> Runs;

/// Runs the target on `table`.
pub fn run(table: &'static AllocatorTable) -> Outcome {
    let d = data();
    let ops: [(&str, Op); 4] = [
        ("f32", f32_op),
        ("bf16_f32", bf16_op),
        ("qd8_f32_qc8w", qd8_op),
        ("f32_qc8w", qc8w_op),
    ];
    let mut outcome = Outcome::default();
    let mut all_ok = true;
    // The pool takes its state from the table captured here (once per process).
    let pool = match keepalloc_kernels::initialize(table).and_then(|()| ThreadPool::new(2)) {
        Ok(p) => p,
        Err(e) => {
            outcome.error = Some(format!("pool: {e}"));
            return outcome;
        }
    };
    for (name, op) in ops {
        let want = match op(&PLAIN, &d, None) {
            Ok((y, _)) => y,
            Err(e) => {
                outcome.error = Some(format!("{name} on the plain table: {e}"));
                return outcome;
            }
        };
        match op(table, &d, Some(&pool)) {
            Ok((y, z)) => {
                let same = |v: &[f32]| v.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                all_ok &= same(&y) && z.as_deref().is_none_or(same);
            }
            Err(e) => {
                outcome.error = Some(format!("{name}: {e}"));
                break;
            }
        }
    }
    drop(pool);
    outcome.output_ok = Some(all_ok);
    outcome
}
