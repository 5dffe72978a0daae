//! `EnvAllocator`: keepalloc's owner wearing ONNX Runtime's `OrtAllocator` face.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, PoisonError};

use crate::ffi::{OrtAllocator, OrtAllocatorType, OrtMemType, OrtMemoryInfo};
use keepalloc_allocators::AllocatorTable;

use crate::OrtError;
use crate::runtime::{ORT_API_VERSION, OnnxRuntime};

/// The alignment of every block handed to ONNX Runtime: what its own CPU allocator gives
/// (MLAS' preferred buffer alignment on x86-64 is 64 bytes).
pub const ORT_ALIGNMENT: usize = 64;

/// Bytes added to every block, as ONNX Runtime's own CPU allocator adds
/// `MLAS_SYMM_QGEMM_BUF_OVERRUN` (MLAS' symmetric int8 GEMM may read that far past a
/// buffer): 30 on ARM64, 0 elsewhere (`core/mlas/inc/mlas.h`).
pub const ORT_OVERRUN: usize = if cfg!(target_arch = "aarch64") { 30 } else { 0 };

/// An `OrtAllocator` whose `Alloc`, `Reserve` and `Free` go to a keepalloc table (the
/// owner's `aligned_allocate` / `aligned_deallocate`), and whose `Info` is a CPU
/// `OrtMemoryInfo` (`"Cpu"`, `OrtDeviceAllocator`, device 0, `OrtMemTypeDefault`): the one
/// sessions created with `session.use_env_allocators=1` look up.
///
/// ONNX Runtime keeps the pointer it was registered with for as long as the env lives, so
/// an `EnvAllocator` is created once per process ([`EnvAllocator::for_table`]) and never
/// dropped. It keeps its own ledger of live blocks (pointer → size), kept outside the owner
/// it forwards to, so a test can compare the two.
#[repr(C)]
pub struct EnvAllocator {
    /// Must be the first field: ONNX Runtime passes `&ort` back as `this_`.
    ort: OrtAllocator,
    table: &'static AllocatorTable,
    info: *mut OrtMemoryInfo,
    ledger: Mutex<HashMap<usize, usize>>,
    allocs: AtomicU64,
    nulls: AtomicU64,
    frees: AtomicU64,
}

// SAFETY: `info` is created once and only read (ONNX Runtime reads an OrtMemoryInfo from any
// thread); the table is a shared read-only struct whose functions are thread-safe (keepalloc's
// table contract); everything else is a Mutex or an atomic.
unsafe impl Send for EnvAllocator {}
// SAFETY: as above.
unsafe impl Sync for EnvAllocator {}

impl core::fmt::Debug for EnvAllocator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EnvAllocator")
            .field("at", &(self as *const Self))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// What an [`EnvAllocator`] saw, counted at its own C entry points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnvAllocatorStats {
    /// `Alloc` and `Reserve` calls that returned a block.
    pub allocs: u64,
    /// `Alloc` and `Reserve` calls that returned NULL.
    pub nulls: u64,
    /// `Free` calls with a non-NULL pointer.
    pub frees: u64,
    /// Blocks handed out and not yet freed.
    pub live_blocks: usize,
    /// Bytes (as ONNX Runtime asked for them) handed out and not yet freed.
    pub live_bytes: usize,
}

static FACE: Mutex<Option<&'static EnvAllocator>> = Mutex::new(None);

impl EnvAllocator {
    /// The process's `EnvAllocator` for `table`: created on the first call (with a new CPU
    /// `OrtMemoryInfo`), the same one on every later call. A failure to create the memory
    /// info creates nothing and can be retried. Asking for a different table than the first
    /// is an error ([`OrtError::OtherTable`]): the first face may already be registered.
    pub fn for_table(
        runtime: &'static OnnxRuntime,
        table: &'static AllocatorTable,
    ) -> Result<&'static EnvAllocator, OrtError> {
        let mut face = FACE.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(face) = *face {
            return if core::ptr::eq(face.table, table) {
                Ok(face)
            } else {
                Err(OrtError::OtherTable)
            };
        }
        let api = runtime.api();
        let mut info: *mut OrtMemoryInfo = core::ptr::null_mut();
        // SAFETY: `info` is a valid out-pointer; the enum values are the header's.
        let status = unsafe {
            (api.CreateCpuMemoryInfo)(
                OrtAllocatorType::OrtDeviceAllocator,
                OrtMemType::OrtMemTypeDefault,
                &mut info,
            )
        };
        runtime.check(status, "CreateCpuMemoryInfo")?;
        let made: &'static EnvAllocator = Box::leak(Box::new(EnvAllocator {
            ort: OrtAllocator {
                version: ORT_API_VERSION,
                Alloc: Some(ort_alloc),
                Free: Some(ort_free),
                Info: Some(ort_info),
                Reserve: Some(ort_reserve),
            },
            table,
            info,
            ledger: Mutex::new(HashMap::new()),
            allocs: AtomicU64::new(0),
            nulls: AtomicU64::new(0),
            frees: AtomicU64::new(0),
        }));
        *face = Some(made);
        Ok(made)
    }

    /// The process's `EnvAllocator`, if one was created.
    pub fn get() -> Option<&'static EnvAllocator> {
        *FACE.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pointer to register with `RegisterAllocator`.
    pub fn as_ort(&'static self) -> *mut OrtAllocator {
        &self.ort as *const OrtAllocator as *mut OrtAllocator
    }

    /// The CPU memory info this allocator reports (and that `UnregisterAllocator` takes).
    pub fn memory_info(&self) -> *const OrtMemoryInfo {
        self.info
    }

    /// The keepalloc table this face forwards to.
    pub fn table(&self) -> &'static AllocatorTable {
        self.table
    }

    /// The counters and the ledger's totals.
    pub fn stats(&self) -> EnvAllocatorStats {
        let ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        EnvAllocatorStats {
            allocs: self.allocs.load(Relaxed),
            nulls: self.nulls.load(Relaxed),
            frees: self.frees.load(Relaxed),
            live_blocks: ledger.len(),
            live_bytes: ledger.values().sum(),
        }
    }

    fn allocate(&self, size: usize) -> *mut c_void {
        let Some(aligned_allocate) = self.table.aligned_allocate() else {
            self.nulls.fetch_add(1, Relaxed);
            return core::ptr::null_mut();
        };
        let Some(padded) = size.checked_add(ORT_OVERRUN) else {
            self.nulls.fetch_add(1, Relaxed);
            return core::ptr::null_mut();
        };
        // SAFETY: the table is complete and its context is the owner, which is never dropped (keepalloc's guarantee); the alignment is a power of two.
        let block = unsafe { aligned_allocate(self.table.context(), ORT_ALIGNMENT, padded) };
        if block.is_null() {
            self.nulls.fetch_add(1, Relaxed);
        } else {
            self.allocs.fetch_add(1, Relaxed);
            self.ledger
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(block as usize, size);
        }
        block
    }

    fn free(&self, block: *mut c_void) {
        if block.is_null() {
            return;
        }
        self.frees.fetch_add(1, Relaxed);
        let known = self
            .ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(block as usize))
            .is_some();
        if !known {
            // Not a block of ours: freeing it through the table would corrupt the owner's
            // heap. There is no status to return from `Free`, so stop here.
            eprintln!(
                "keepalloc-onnxruntime: Free of {block:p}, which this allocator never handed out"
            );
            std::process::abort();
        }
        if let Some(aligned_deallocate) = self.table.aligned_deallocate() {
            // SAFETY: `block` came from this table's `aligned_allocate` (the ledger says so) and is freed once (it was just removed from the ledger).
            unsafe { aligned_deallocate(self.table.context(), block) };
        }
    }
}

/// Runs `f`; a panic must not unwind into ONNX Runtime, so it aborts with a message.
fn no_unwind<R>(what: &str, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("keepalloc-onnxruntime: panic in OrtAllocator::{what}; aborting");
            std::process::abort();
        }
    }
}

/// # Safety
/// `this` is the `ort` field of a live `EnvAllocator` (the only `OrtAllocator` whose `Alloc`
/// is this function).
unsafe fn face<'a>(this: *const OrtAllocator) -> &'a EnvAllocator {
    // SAFETY: `ort` is the first field of the `#[repr(C)]` EnvAllocator, so the pointers are equal; the caller promises `this` came from an EnvAllocator, which is never dropped.
    unsafe { &*(this as *const EnvAllocator) }
}

unsafe extern "system" fn ort_alloc(this: *mut OrtAllocator, size: usize) -> *mut c_void {
    // SAFETY: ONNX Runtime calls `Alloc` with the pointer it was registered with.
    let face = unsafe { face(this) };
    no_unwind("Alloc", || face.allocate(size))
}

unsafe extern "system" fn ort_reserve(this: *const OrtAllocator, size: usize) -> *mut c_void {
    // SAFETY: as in `ort_alloc`.
    let face = unsafe { face(this) };
    no_unwind("Reserve", || face.allocate(size))
}

unsafe extern "system" fn ort_free(this: *mut OrtAllocator, block: *mut c_void) {
    // SAFETY: as in `ort_alloc`.
    let face = unsafe { face(this) };
    no_unwind("Free", || face.free(block))
}

unsafe extern "system" fn ort_info(this: *const OrtAllocator) -> *const OrtMemoryInfo {
    // SAFETY: as in `ort_alloc`.
    let face = unsafe { face(this) };
    face.info
}
