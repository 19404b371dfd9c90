//! Resolving return addresses to functions and source lines, on the machine
//! that recorded them (the binaries are there), so that traces can be
//! reported anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized, Symbolizer};
use gmem_prof_traces::record::{ModuleInfo, SymbolFrame, SymbolInfo};

/// What symbolization found, and why some modules could not be resolved.
#[derive(Default)]
pub struct Resolved {
    pub symbols: Vec<SymbolInfo>,
    /// Module path → reason, for modules whose frames stay module+offset.
    pub unresolved: BTreeMap<String, String>,
}

fn file_of(ci: &CodeInfo) -> String {
    ci.to_path().to_string_lossy().into_owned()
}

fn frame(name: &str, ci: Option<&CodeInfo>) -> SymbolFrame {
    SymbolFrame {
        function: name.to_string(),
        file: ci.map(file_of).unwrap_or_default(),
        line: ci.and_then(|c| c.line).unwrap_or(0),
        column: ci.and_then(|c| c.column).map(u32::from).unwrap_or(0),
    }
}

fn file_build_id(path: &Path) -> Option<Vec<u8>> {
    let f = std::fs::File::open(path).ok()?;
    // SAFETY: read-only mapping of a library file; only its headers are read.
    let map = unsafe { memmap2::Mmap::map(&f) }.ok()?;
    gmem_prof_traces::build_id::of_elf_file(&map).map(<[u8]>::to_vec)
}

/// Resolves `addresses` (return addresses of one process) with the modules
/// that process had loaded. Addresses in no known module, or in a module
/// whose file is gone or changed since (build id differs), get a record with
/// no frames: reports show them as module+offset.
pub fn resolve(modules: &[ModuleInfo], addresses: &BTreeSet<u64>) -> Resolved {
    let mut out = Resolved::default();
    let mut sorted: Vec<&ModuleInfo> = modules.iter().collect();
    sorted.sort_by_key(|m| m.start);
    let find = |a: u64| -> Option<&ModuleInfo> {
        let i = sorted.partition_point(|m| m.start <= a);
        let m = *sorted.get(i.checked_sub(1)?)?;
        (a < m.end).then_some(m)
    };
    let mut by_module: BTreeMap<u32, (&ModuleInfo, Vec<u64>)> = BTreeMap::new();
    for &a in addresses {
        match find(a) {
            Some(m) => by_module.entry(m.id).or_insert((m, Vec::new())).1.push(a),
            None => out.symbols.push(SymbolInfo {
                address: a,
                ..Default::default()
            }),
        }
    }
    let symbolizer = Symbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        .enable_demangling(true)
        .build();
    for (_, (m, addrs)) in by_module {
        let unresolved = |out: &mut Resolved, why: String| {
            out.unresolved.insert(m.path.clone(), why);
            for &a in &addrs {
                out.symbols.push(SymbolInfo {
                    address: a,
                    module: m.id,
                    module_offset: a.wrapping_sub(m.bias),
                    frames: Vec::new(),
                });
            }
        };
        let path = Path::new(&m.path);
        if !path.is_absolute() || !path.is_file() {
            unresolved(&mut out, "no such file on this machine".into());
            continue;
        }
        if !m.build_id.is_empty() && file_build_id(path).is_some_and(|id| id != m.build_id) {
            unresolved(
                &mut out,
                "the file changed since the recording (build id differs)".into(),
            );
            continue;
        }
        // A return address points after the call; look up the call itself.
        let offsets: Vec<u64> = addrs
            .iter()
            .map(|a| a.wrapping_sub(m.bias).wrapping_sub(1))
            .collect();
        let src = Source::Elf(Elf::new(path));
        let results = match symbolizer.symbolize(&src, Input::VirtOffset(&offsets)) {
            Ok(r) => r,
            Err(e) => {
                unresolved(&mut out, format!("cannot read its symbols: {e}"));
                continue;
            }
        };
        for (&a, r) in addrs.iter().zip(results) {
            let mut info = SymbolInfo {
                address: a,
                module: m.id,
                module_offset: a.wrapping_sub(m.bias),
                frames: Vec::new(),
            };
            if let Symbolized::Sym(sym) = r {
                // Innermost first: the inlined chain reversed, then the
                // function the code was inlined into.
                for f in sym.inlined.iter().rev() {
                    info.frames.push(frame(&f.name, f.code_info.as_ref()));
                }
                info.frames.push(frame(&sym.name, sym.code_info.as_deref()));
            }
            out.symbols.push(info);
        }
    }
    out.symbols.sort_by_key(|s| s.address);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(42)
    }

    /// Resolves an address of this test binary with the module description
    /// /proc/self/maps gives, the way the collector records it.
    #[test]
    fn resolves_a_function_of_this_binary() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe_s = exe.to_string_lossy().to_string();
        let mut lo = u64::MAX;
        let mut hi = 0;
        let mut bias = None;
        for l in maps.lines().filter(|l| l.ends_with(exe_s.as_str())) {
            let mut it = l.split_whitespace();
            let (range, _perms, off) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            let (s, e) = range.split_once('-').unwrap();
            let (s, e) = (
                u64::from_str_radix(s, 16).unwrap(),
                u64::from_str_radix(e, 16).unwrap(),
            );
            if u64::from_str_radix(off, 16).unwrap() == 0 {
                bias = Some(s); // PIE: first mapping at file offset 0, vaddr 0
            }
            lo = lo.min(s);
            hi = hi.max(e);
        }
        let f = a_function_to_find as *const () as u64;
        assert_eq!(a_function_to_find(), 42);
        let m = ModuleInfo {
            id: 1,
            path: exe_s,
            bias: bias.unwrap(),
            start: lo,
            end: hi,
            build_id: vec![],
        };
        // +1: resolve() looks up address-1, as for a return address.
        let r = resolve(&[m], &[f + 1].into_iter().collect());
        assert!(r.unresolved.is_empty(), "{:?}", r.unresolved);
        let name = &r.symbols[0].frames.last().unwrap().function;
        assert!(name.contains("a_function_to_find"), "{name}");
    }

    /// Debian's and Ubuntu's debug files (libc6-dbg, -dbgsym packages)
    /// carry their DWARF compressed (SHF_COMPRESSED, zlib): a library built
    /// so resolves to its function, file and line. (zstd, which some
    /// distributions use, is read too; this machine's binutils cannot write
    /// it.)
    #[test]
    fn resolves_a_library_with_compressed_debug_sections() {
        let dir = std::env::temp_dir().join(format!("gmem-prof-gz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, lib) = (dir.join("gz.c"), dir.join("libgz.so"));
        std::fs::write(
            &src,
            "int compressed_fn(int x) {\n    return x * 3 + 1;\n}\n",
        )
        .unwrap();
        let built = std::process::Command::new("cc")
            .args(["-g", "-O0", "-shared", "-fPIC", "-gz=zlib", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .unwrap();
        assert!(built.success());
        let sections = std::process::Command::new("readelf")
            .args(["-t", "-W"])
            .arg(&lib)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&sections.stdout).contains("ZLIB"),
            "the compiler wrote no compressed debug section"
        );
        // The function's offset, from the symbol table (not compressed).
        let mut symtab = blazesym::inspect::source::Elf::new(&lib);
        symtab.debug_syms = false;
        let inspector = blazesym::inspect::Inspector::new();
        let found = inspector
            .lookup(&symtab.into(), &["compressed_fn"])
            .unwrap();
        let offset = found[0][0].addr;
        let bias = 0x7f00_0000_0000;
        let m = ModuleInfo {
            id: 3,
            path: lib.to_string_lossy().into_owned(),
            bias,
            start: bias,
            end: bias + (1 << 20),
            build_id: vec![],
        };
        // Two bytes into the function, +1 as for a return address.
        let r = resolve(&[m], &[bias + offset + 3].into_iter().collect());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(r.unresolved.is_empty(), "{:?}", r.unresolved);
        let f = r.symbols[0].frames.last().unwrap();
        assert_eq!(f.function, "compressed_fn");
        assert!(f.file.ends_with("gz.c"), "{}", f.file);
        assert!((1..=2).contains(&f.line), "{}", f.line);
    }

    #[test]
    fn missing_files_and_unknown_addresses_stay_unresolved() {
        let m = ModuleInfo {
            id: 7,
            path: "/nonexistent/libfoo.so".into(),
            bias: 0x1000,
            start: 0x1000,
            end: 0x2000,
            build_id: vec![],
        };
        let r = resolve(&[m], &[0x1500, 0x9999].into_iter().collect());
        assert_eq!(r.symbols.len(), 2);
        assert!(r.symbols.iter().all(|s| s.frames.is_empty()));
        assert_eq!(r.symbols[0].module, 7);
        assert_eq!(r.symbols[0].module_offset, 0x500);
        assert_eq!(r.symbols[1].module, 0);
        assert!(r.unresolved.contains_key("/nonexistent/libfoo.so"));
    }
}
