//! Can a preloaded `xnn_initialize` reach a library's XNNPACK? Read from the file's ELF symbol
//! tables and relocations, without loading it.
//!
//! `LD_PRELOAD=libkeepalloc_preload.so` receives a call only when the call goes through the
//! dynamic linker: the callee is an exported (default-visibility) symbol and the caller's
//! call is relocated against it (a PLT `JUMP_SLOT` or a GOT `GLOB_DAT` entry). A library
//! that embeds XNNPACK with hidden symbols (LiteRT's `libpywrap_litert_common.so`) calls it
//! directly: nothing outside can take the call, and the answer is "not adoptable (hidden)".

use std::path::Path;

use crate::XnnpackError;

/// What a library's ELF file says about reaching its `xnn_initialize` from a preload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interposition {
    /// It exports (or imports) `xnn_initialize` and calls it through `relocations` PLT/GOT
    /// relocations: a preloaded definition receives those calls.
    Reachable {
        /// `R_X86_64_JUMP_SLOT`/`R_X86_64_GLOB_DAT` relocations against `xnn_initialize`.
        relocations: usize,
    },
    /// It exports `xnn_initialize` but never calls it through a relocation: its callers are
    /// other objects (a preload reaches those that call it through their own PLT).
    ExportedOnly,
    /// Nothing outside the library can reach its XNNPACK.
    Hidden {
        /// Why, from the symbol tables.
        reason: String,
    },
    /// The library has no `xnn_initialize` at all (in `.dynsym` or `.symtab`).
    Absent {
        /// What was looked at.
        reason: String,
    },
}

impl core::fmt::Display for Interposition {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Interposition::Reachable { relocations } => write!(
                f,
                "adoptable by interposition: xnn_initialize is in its dynamic symbol table and \
                 it calls it through {relocations} PLT/GOT relocation(s)"
            ),
            Interposition::ExportedOnly => f.write_str(
                "adoptable where its callers call it through their PLT: it exports \
                 xnn_initialize and never calls it through a relocation itself",
            ),
            Interposition::Hidden { reason } => write!(f, "not adoptable (hidden): {reason}"),
            Interposition::Absent { reason } => write!(f, "no XNNPACK: {reason}"),
        }
    }
}

const SHT_SYMTAB: u32 = 2;
const SHT_RELA: u32 = 4;
const SHT_DYNSYM: u32 = 11;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;
const STB_LOCAL: u8 = 0;
const STV_DEFAULT: u8 = 0;
const SYMBOL: &[u8] = b"xnn_initialize";

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
    entsize: usize,
}

struct Symbol<'a> {
    name: &'a [u8],
    binding: u8,
    visibility: u8,
    defined: bool,
    value: u64,
}

/// A bounds-checked little-endian reader of one file's bytes.
struct Elf<'a> {
    bytes: &'a [u8],
}

impl<'a> Elf<'a> {
    fn get(&self, at: usize, len: usize) -> Option<&'a [u8]> {
        self.bytes.get(at..at.checked_add(len)?)
    }
    fn u8(&self, at: usize) -> Option<u8> {
        self.bytes.get(at).copied()
    }
    fn u16(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.get(at, 2)?.try_into().ok()?))
    }
    fn u32(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.get(at, 4)?.try_into().ok()?))
    }
    fn u64(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.get(at, 8)?.try_into().ok()?))
    }
    fn usize(&self, at: usize) -> Option<usize> {
        usize::try_from(self.u64(at)?).ok()
    }

    fn sections(&self) -> Option<Vec<Section>> {
        let shoff = self.usize(0x28)?;
        let shentsize = usize::from(self.u16(0x3A)?);
        let shnum = usize::from(self.u16(0x3C)?);
        if shentsize < 64 {
            return None;
        }
        (0..shnum)
            .map(|i| {
                let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
                Some(Section {
                    kind: self.u32(at + 4)?,
                    offset: self.usize(at + 24)?,
                    size: self.usize(at + 32)?,
                    link: usize::try_from(self.u32(at + 40)?).ok()?,
                    entsize: self.usize(at + 56)?,
                })
            })
            .collect()
    }

    /// The symbols of a symbol table section, by index.
    fn symbols(&self, sections: &[Section], table: &Section) -> Option<Vec<Symbol<'a>>> {
        let strings = sections.get(table.link)?;
        let strtab = self.get(strings.offset, strings.size)?;
        let entsize = if table.entsize == 0 {
            24
        } else {
            table.entsize
        };
        (0..table.size / entsize)
            .map(|i| {
                let at = table.offset.checked_add(i.checked_mul(entsize)?)?;
                let name_at = usize::try_from(self.u32(at)?).ok()?;
                let rest = strtab.get(name_at..)?;
                let name = &rest[..rest.iter().position(|&b| b == 0)?];
                let info = self.u8(at + 4)?;
                Some(Symbol {
                    name,
                    binding: info >> 4,
                    visibility: self.u8(at + 5)? & 3,
                    defined: self.u16(at + 6)? != 0,
                    value: self.u64(at + 8)?,
                })
            })
            .collect()
    }
}

/// Reads `path`'s ELF file and says whether a preloaded `xnn_initialize` reaches its calls.
///
/// Only 64-bit little-endian ELF files are read (x86-64 relocation types); anything else, or
/// a truncated or malformed file, is [`XnnpackError::Elf`].
pub fn interposition(path: &Path) -> Result<Interposition, XnnpackError> {
    let bad = |why: &str| XnnpackError::Elf(path.to_path_buf(), why.to_owned());
    let bytes = std::fs::read(path).map_err(|e| bad(&e.to_string()))?;
    if bytes.get(..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    let elf = Elf { bytes: &bytes };
    let malformed = || bad("malformed or truncated section headers or symbol tables");
    let sections = elf.sections().ok_or_else(malformed)?;
    let table = |kind: u32| sections.iter().position(|s| s.kind == kind);
    let dynsym_index = table(SHT_DYNSYM);
    let dynsym = match dynsym_index {
        Some(i) => elf.symbols(&sections, &sections[i]).ok_or_else(malformed)?,
        None => Vec::new(),
    };
    let exported_xnn = dynsym
        .iter()
        .filter(|s| s.defined && s.name.starts_with(b"xnn_"))
        .count();
    let dynamic = dynsym
        .iter()
        .position(|s| s.name == SYMBOL && s.binding != STB_LOCAL && s.visibility == STV_DEFAULT);
    if let (Some(sym), Some(dynsym_index)) = (dynamic, dynsym_index) {
        let mut relocations = 0;
        for rela in sections
            .iter()
            .filter(|s| s.kind == SHT_RELA && s.link == dynsym_index)
        {
            let entsize = if rela.entsize == 0 { 24 } else { rela.entsize };
            for i in 0..rela.size / entsize {
                let info = elf
                    .u64(rela.offset + i * entsize + 8)
                    .ok_or_else(malformed)?;
                let kind = (info & 0xffff_ffff) as u32;
                if (info >> 32) as usize == sym
                    && (kind == R_X86_64_JUMP_SLOT || kind == R_X86_64_GLOB_DAT)
                {
                    relocations += 1;
                }
            }
        }
        return Ok(if relocations > 0 {
            Interposition::Reachable { relocations }
        } else if dynsym[sym].defined {
            Interposition::ExportedOnly
        } else {
            Interposition::Absent {
                reason: "xnn_initialize is imported but never called through a relocation".into(),
            }
        });
    }
    if dynsym
        .iter()
        .any(|s| s.name == SYMBOL && s.defined && s.binding != STB_LOCAL)
    {
        return Ok(Interposition::Hidden {
            reason: "xnn_initialize is in its dynamic symbol table with protected visibility: \
                     its own calls are bound inside the library"
                .into(),
        });
    }
    let dynamic_note = format!(
        "xnn_initialize is not in its dynamic symbol table (.dynsym: {} symbols, {exported_xnn} \
         defined xnn_* ones)",
        dynsym.len()
    );
    let symtab = match table(SHT_SYMTAB) {
        Some(i) => Some(elf.symbols(&sections, &sections[i]).ok_or_else(malformed)?),
        None => None,
    };
    let Some(symtab) = symtab else {
        return Ok(Interposition::Absent {
            reason: format!("{dynamic_note}, and it has no .symtab (stripped) to say more"),
        });
    };
    let local_xnn = symtab
        .iter()
        .filter(|s| s.defined && s.name.starts_with(b"xnn_"))
        .count();
    match symtab.iter().find(|s| s.name == SYMBOL && s.defined) {
        Some(s) => Ok(Interposition::Hidden {
            reason: format!(
                "{dynamic_note}; its .symtab has xnn_initialize at {:#x} as a {} symbol ({} xnn_* \
                 symbols there): its XNNPACK is built in and called directly, so no definition \
                 outside the library (LD_PRELOAD included) receives the call",
                s.value,
                if s.binding == STB_LOCAL {
                    "local"
                } else {
                    "non-default-visibility"
                },
                local_xnn
            ),
        }),
        None => Ok(Interposition::Absent {
            reason: format!("{dynamic_note}, and its .symtab has none either"),
        }),
    }
}
