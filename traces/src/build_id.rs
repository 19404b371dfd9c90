//! GNU build ids, read the same way by the collector (from a module mapped in
//! memory) and by the CLI (from the file on disk), so they can be compared.

/// Finds the NT_GNU_BUILD_ID note (owner "GNU", type 3) in the contents of a
/// PT_NOTE segment. `align` is the segment's p_align: notes in 8-aligned
/// segments (.note.gnu.property) pad to 8 bytes, others to 4. Other owners'
/// notes of type 3 (SystemTap's "stapsdt", for one) are skipped.
pub fn find_in_notes(notes: &[u8], align: u64) -> Option<&[u8]> {
    let pad = if align == 8 { 8 } else { 4 };
    let round = |n: usize| n.checked_add(pad - 1).map(|v| v / pad * pad);
    let word = |o: usize| -> Option<usize> {
        Some(u32::from_le_bytes(notes.get(o..o.checked_add(4)?)?.try_into().ok()?) as usize)
    };
    let mut i = 0usize;
    while i.checked_add(12)? <= notes.len() {
        let namesz = word(i)?;
        let descsz = word(i + 4)?;
        let ty = word(i + 8)?;
        let name_at = i + 12;
        // Padding aligns absolute offsets within the segment.
        let desc_at = round(name_at.checked_add(namesz)?)?;
        let end = round(desc_at.checked_add(descsz)?)?;
        if ty == 3 && namesz == 4 && notes.get(name_at..name_at + 4) == Some(b"GNU\0") {
            return notes.get(desc_at..desc_at.checked_add(descsz)?);
        }
        if end <= i {
            return None;
        }
        i = end;
    }
    None
}

/// The build id of an ELF64 little-endian file's bytes, found through its
/// program headers, or None.
pub fn of_elf_file(file: &[u8]) -> Option<&[u8]> {
    if file.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(file.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(file.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(file.get(o..o + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for k in 0..phnum {
        let ph = phoff.checked_add(k.checked_mul(phentsize)?)?;
        if u32_at(ph)? != 4 {
            continue; // not PT_NOTE
        }
        let off = usize::try_from(u64_at(ph + 8)?).ok()?;
        let size = usize::try_from(u64_at(ph + 32)?).ok()?;
        let align = u64_at(ph + 48)?;
        let notes = file.get(off..off.checked_add(size)?)?;
        if let Some(id) = find_in_notes(notes, align) {
            return Some(id);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], ty: u32, desc: &[u8], pad: usize) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(name.len() as u32).to_le_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(name);
        while v.len() % pad != 0 {
            v.push(0);
        }
        v.extend_from_slice(desc);
        while v.len() % pad != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn skips_type_3_notes_of_other_owners() {
        let mut notes = note(b"stapsdt\0", 3, &[9; 40], 4);
        notes.extend(note(b"GNU\0", 3, &[1, 2, 3, 4, 5], 4));
        assert_eq!(find_in_notes(&notes, 4), Some(&[1u8, 2, 3, 4, 5][..]));
    }

    #[test]
    fn handles_8_byte_aligned_note_segments() {
        let mut notes = note(b"GNU\0", 5, &[7; 12], 8);
        notes.extend(note(b"GNU\0", 3, &[4; 20], 8));
        assert_eq!(find_in_notes(&notes, 8), Some(&[4u8; 20][..]));
    }

    #[test]
    fn reads_this_test_binarys_build_id_if_it_has_one() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        if let Some(id) = of_elf_file(&exe) {
            assert!(id.len() >= 8);
        }
        assert_eq!(of_elf_file(b"not an elf file at all"), None);
    }

    #[test]
    fn never_panics_on_junk() {
        for n in 0..64 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let _ = find_in_notes(&junk, 4);
            let _ = find_in_notes(&junk, 8);
        }
    }
}
