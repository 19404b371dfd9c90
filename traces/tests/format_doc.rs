//! FORMAT.md's table of records is the format's documentation: every kind
//! of record the code knows is there with its tag, and nothing else is.

use gmem_prof_traces::Record;

#[test]
fn format_md_lists_every_record_kind_with_its_tag() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/FORMAT.md"))
        .expect("FORMAT.md");
    // Rows of the record table: "| 7 | Memory | body… |".
    let mut rows: Vec<(String, u8)> = doc
        .lines()
        .filter_map(|l| {
            let mut cells = l.split('|').map(str::trim).skip(1);
            let tag = cells.next()?.parse::<u8>().ok()?;
            let name = cells.next()?.to_string();
            Some((name, tag))
        })
        .collect();
    let mut kinds: Vec<(String, u8)> = Record::KINDS
        .iter()
        .map(|(n, t)| (n.to_string(), *t))
        .collect();
    rows.sort_by_key(|r| r.1);
    kinds.sort_by_key(|k| k.1);
    assert_eq!(rows, kinds, "FORMAT.md's table against record_kinds!");
    // A tag is never used twice.
    assert!(kinds.windows(2).all(|w| w[0].1 < w[1].1));
}
