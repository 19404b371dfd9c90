//! Reading ELF images: from a module's mapped program headers (its build id,
//! where its unwind tables are) and from its file on disk (the symbol table,
//! local symbols included, which `dlsym` cannot see).

use std::ops::{Deref, Range};

use framehop::ExplicitModuleSectionInfo;

/// Bytes of a module image mapped in this process.
#[derive(Clone, Copy)]
pub struct Mapped {
    ptr: *const u8,
    len: usize,
}

// SAFETY: Mapped points into a read-only, never-written segment of a loaded
// module; sharing the pointer between threads is as safe as the mapping.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Default for Mapped {
    fn default() -> Self {
        Mapped {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }
}

impl Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr/len describe a range inside a loaded module's segment,
        // checked when the module was registered.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

pub const PT_LOAD: u32 = 1;
pub const PT_NOTE: u32 = 4;
pub const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
pub const PF_X: u32 = 1;

/// # Safety
/// `addr..addr+len` must be mapped and readable.
pub unsafe fn gnu_build_id(addr: u64, len: u64, align: u64) -> Option<Vec<u8>> {
    // SAFETY: guaranteed by the caller.
    let notes = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
    gmem_prof_traces::build_id::find_in_notes(notes, align).map(<[u8]>::to_vec)
}

/// Builds framehop's view of a module's unwind sections from its mapped
/// `.eh_frame_hdr` (found through PT_GNU_EH_FRAME).
///
/// # Safety
/// The header range and the module's load segments must be mapped.
pub unsafe fn eh_frame_info(
    bias: u64,
    hdr_svma: u64,
    hdr_len: u64,
    loads: &[Range<u64>],
    text: Option<Range<u64>>,
) -> Option<ExplicitModuleSectionInfo<Mapped>> {
    if hdr_len < 8 {
        return None;
    }
    let hdr = (bias + hdr_svma) as *const u8;
    // SAFETY: the header is at least 8 bytes long (checked) and mapped.
    let (version, enc) = unsafe { (*hdr, *hdr.add(1)) };
    if version != 1 {
        return None;
    }
    // SAFETY: bytes 4..8 are inside the header.
    let raw = unsafe { std::ptr::read_unaligned(hdr.add(4) as *const i32) } as i64;
    let raw_u = raw as u32 as u64;
    // eh_frame_ptr: DW_EH_PE_* encodings seen in practice.
    let eh_svma = match enc {
        0x1b => (hdr_svma as i64 + 4 + raw) as u64, // pcrel | sdata4
        0x3b => (hdr_svma as i64 + raw) as u64,     // datarel | sdata4
        0x03 => raw_u.wrapping_sub(bias),           // udata4, absolute
        0x0b => (raw as u64).wrapping_sub(bias),    // sdata4, absolute
        _ => return None,
    };
    // .eh_frame's own length is not recorded; it runs at most to the end of
    // the load segment holding it.
    let seg = loads.iter().find(|r| r.contains(&eh_svma))?;
    let eh_len = seg.end - eh_svma;
    Some(ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: text,
        eh_frame_hdr_svma: Some(hdr_svma..hdr_svma + hdr_len),
        eh_frame_hdr: Some(Mapped {
            ptr: hdr,
            len: hdr_len as usize,
        }),
        eh_frame_svma: Some(eh_svma..eh_svma + eh_len),
        eh_frame: Some(Mapped {
            ptr: (bias + eh_svma) as *const u8,
            len: eh_len as usize,
        }),
        ..Default::default()
    })
}

/// A symbol found in a module's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSymbol {
    /// Its address in the file's address space (add the load bias).
    pub value: u64,
    pub size: u64,
}

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;

/// Looks symbols up in an ELF file's symbol tables (`.symtab`, which holds
/// local symbols too, then `.dynsym`): for each name `pick` maps to a slot,
/// the first symbol of that slot. `pick` sees raw (mangled) names.
pub fn find_symbols(
    file: &[u8],
    slots: usize,
    pick: impl Fn(&[u8]) -> Option<usize>,
) -> Result<Vec<Option<FileSymbol>>, String> {
    let mut found: Vec<Option<FileSymbol>> = vec![None; slots];
    each_symbol(file, |name, _, symbol| {
        if let Some(slot) = pick(name) {
            if let Some(entry @ None) = found.get_mut(slot) {
                *entry = Some(symbol);
            }
        }
    })?;
    Ok(found)
}

/// `STT_FUNC`: a symbol's type (`st_info`'s low nibble) for code.
pub const SYMBOL_FUNCTION: u8 = 2;

/// Every named symbol of an ELF file's symbol tables (`.symtab`, then
/// `.dynsym`) with its type (`SYMBOL_FUNCTION`, ...), in table order.
pub fn each_symbol(
    file: &[u8],
    mut visit: impl FnMut(&[u8], u8, FileSymbol),
) -> Result<(), String> {
    let bad = |what: &str| format!("not an ELF file we can read ({what})");
    let u16_at = |at: usize| -> Option<u64> {
        Some(u16::from_le_bytes(file.get(at..at + 2)?.try_into().ok()?).into())
    };
    let u32_at = |at: usize| -> Option<u64> {
        Some(u32::from_le_bytes(file.get(at..at + 4)?.try_into().ok()?).into())
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(file.get(at..at + 8)?.try_into().ok()?))
    };
    if file.get(..6) != Some(b"\x7fELF\x02\x01") {
        return Err(bad("not 64-bit little-endian ELF"));
    }
    let shoff = u64_at(0x28).ok_or_else(|| bad("header"))? as usize;
    let shentsize = u16_at(0x3a).ok_or_else(|| bad("header"))? as usize;
    let shnum = u16_at(0x3c).ok_or_else(|| bad("header"))? as usize;
    if shentsize < 64 {
        return Err(bad("section header size"));
    }
    for wanted_type in [SHT_SYMTAB, SHT_DYNSYM] {
        for i in 0..shnum {
            let sh = shoff + i * shentsize;
            let Some(sh_type) = u32_at(sh + 4) else {
                return Err(bad("section headers"));
            };
            if sh_type as u32 != wanted_type {
                continue;
            }
            let (Some(off), Some(size), Some(link), Some(entsize)) = (
                u64_at(sh + 24),
                u64_at(sh + 32),
                u32_at(sh + 40),
                u64_at(sh + 56),
            ) else {
                return Err(bad("symbol table header"));
            };
            let strtab = shoff + link as usize * shentsize;
            let (Some(str_off), Some(str_size)) = (u64_at(strtab + 24), u64_at(strtab + 32)) else {
                return Err(bad("string table header"));
            };
            let names = file
                .get(str_off as usize..(str_off + str_size) as usize)
                .ok_or_else(|| bad("string table"))?;
            if entsize < 24 {
                return Err(bad("symbol size"));
            }
            let count = (size / entsize) as usize;
            for k in 0..count {
                let s = off as usize + k * entsize as usize;
                let (Some(name), Some(info), Some(value), Some(sym_size)) =
                    (u32_at(s), file.get(s + 4), u64_at(s + 8), u64_at(s + 16))
                else {
                    return Err(bad("symbol table"));
                };
                if value == 0 {
                    continue;
                }
                let Some(rest) = names.get(name as usize..) else {
                    continue;
                };
                let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
                visit(
                    &rest[..end],
                    info & 0xf,
                    FileSymbol {
                        value,
                        size: sym_size,
                    },
                );
            }
        }
    }
    Ok(())
}

/// A file mapped read-only into memory: a large library's symbol tables
/// are read where they lie, without copying the file (libtorch_cuda.so is
/// over a gigabyte, most of it GPU code).
pub struct MappedFile {
    ptr: *mut libc::c_void,
    len: usize,
}

impl MappedFile {
    pub fn open(path: &str) -> Result<MappedFile, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot read {path}: {e}"))?
            .len() as usize;
        if len == 0 {
            return Err(format!("{path} is empty"));
        }
        // SAFETY: a private read-only mapping of an open file descriptor;
        // the mapping outlives the descriptor, and is unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "cannot map {path}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(MappedFile { ptr, len })
    }
}

impl Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped readable at `ptr` until drop.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our own test executable has a symbol table with this function in it.
    #[test]
    fn finds_local_and_exported_symbols_in_a_file() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let found = find_symbols(&exe, 2, |name| {
            if name == b"main" {
                Some(0)
            } else if name.ends_with(b"finds_local_and_exported_symbols_in_a_file")
                || std::str::from_utf8(name)
                    .is_ok_and(|n| n.contains("finds_local_and_exported_symbols_in_a_file"))
            {
                Some(1)
            } else {
                None
            }
        })
        .unwrap();
        assert!(found[0].is_some_and(|s| s.value != 0), "{found:?}");
        assert!(found[1].is_some_and(|s| s.size > 0), "{found:?}");
        assert!(find_symbols(b"not elf", 1, |_| Some(0)).is_err());
        assert!(find_symbols(&exe[..100], 1, |_| Some(0)).is_err());
    }
}
