//! The pickle codec: what the writer writes reads back the same, damage
//! and code are refused with an error, never a panic.

use gmem_prof_torch_snapshot::pickle::{self, Obj, Pickle, Val, Writer};

fn written(f: impl FnOnce(&mut Writer<Vec<u8>>) -> std::io::Result<()>) -> Vec<u8> {
    let mut w = Writer::new(Vec::new()).unwrap();
    f(&mut w).unwrap();
    w.finish().unwrap()
}

fn list(p: &Pickle, v: Val) -> Vec<Val> {
    p.list(v).expect("a list").to_vec()
}

#[test]
fn values_read_back_as_written() {
    let ints = [
        0i64,
        255,
        256,
        65_535,
        65_536,
        -1,
        -129,
        i64::from(i32::MAX),
        i64::from(i32::MIN),
        0x7f33_cc80_0000,
        -0x7f33_cc80_0000,
        i64::MAX,
        i64::MIN,
    ];
    let long = "x".repeat(300);
    let data = written(|w| {
        w.begin_dict()?;
        w.str("ints")?;
        w.begin_list()?;
        for i in ints {
            w.int(i)?;
        }
        w.end_list()?;
        w.key_str("short", "stream_0")?;
        w.key_str("long", &long)?;
        w.key_str("again", "stream_0")?;
        w.str("float")?;
        w.float(0.25)?;
        w.str("flags")?;
        w.begin_list()?;
        w.bool(true)?;
        w.bool(false)?;
        w.none()?;
        w.end_list()?;
        w.str("many")?;
        w.begin_list()?;
        for i in 0..2500 {
            w.int(i)?;
        }
        w.end_list()?;
        w.end_dict()
    });
    let p = pickle::read(&data).unwrap();
    let root = p.root.unwrap();
    let got: Vec<i64> = list(&p, p.get(root, "ints").unwrap())
        .into_iter()
        .map(|v| match v {
            Val::Int(i) => i,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, ints);
    assert_eq!(p.str(p.get(root, "short").unwrap()), Some("stream_0"));
    assert_eq!(p.str(p.get(root, "long").unwrap()), Some(long.as_str()));
    // The repeated string is the memo's: one object, used twice.
    assert_eq!(p.get(root, "again"), p.get(root, "short"));
    assert_eq!(p.get(root, "float"), Some(Val::Float(0.25)));
    assert_eq!(
        list(&p, p.get(root, "flags").unwrap()),
        vec![Val::Bool(true), Val::Bool(false), Val::None]
    );
    let many = list(&p, p.get(root, "many").unwrap());
    assert_eq!(many.len(), 2500);
    assert_eq!(many[2499], Val::Int(2499));
}

#[test]
fn shared_lists_are_one_object() {
    let data = written(|w| {
        w.begin_list()?;
        w.begin_list()?;
        w.str("frame")?;
        let i = w.end_list_shared()?;
        w.shared(i)?;
        w.end_list()
    });
    let p = pickle::read(&data).unwrap();
    let outer = list(&p, p.root.unwrap());
    assert_eq!(outer.len(), 2);
    assert_eq!(outer[0], outer[1]);
    assert!(matches!(p.obj(outer[0]), Some(Obj::List(l)) if l.len() == 1));
}

#[test]
fn every_cut_is_an_error_not_a_panic() {
    let data = written(|w| {
        w.begin_dict()?;
        w.key_int("address", 0x7f33_cc80_0000)?;
        w.key_str("state", "active_allocated")?;
        w.str("f")?;
        w.float(1.5)?;
        w.end_dict()
    });
    assert!(pickle::read(&data).is_ok());
    for n in 0..data.len() {
        assert!(pickle::read(&data[..n]).is_err(), "cut at {n}");
    }
}

#[test]
fn code_is_refused_with_its_opcode() {
    // pickle.dumps(os.system) at protocol 2: GLOBAL 'posix system'.
    let data = b"\x80\x02cposix\nsystem\nq\x00.";
    let e = pickle::read(data).unwrap_err();
    assert!(e.to_string().contains("GLOBAL"), "{e}");
    assert_eq!(e.offset, 2);
    // Protocol 4's STACK_GLOBAL after two strings.
    let data = b"\x80\x04\x8c\x05posix\x8c\x06system\x93.";
    assert!(pickle::read(data)
        .unwrap_err()
        .to_string()
        .contains("STACK_GLOBAL"));
}

#[test]
fn bad_memo_and_stack_are_errors() {
    for data in [
        &b"\x80\x04h\x05."[..],            // BINGET of nothing stored
        &b"\x80\x04e."[..],                // APPENDS with no MARK
        &b"\x80\x04K\x01u."[..],           // SETITEMS with no MARK
        &b"\x80\x04(K\x01K\x02e."[..],     // APPENDS onto no list
        &b"\x80\x04."[..],                 // STOP on an empty stack
        &b"\x80\x06."[..],                 // a protocol from the future
        &b"\x80\x04\x8c\x02\xff\xfe."[..], // a string that is not UTF-8
    ] {
        assert!(pickle::read(data).is_err(), "{data:?}");
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A deterministic walk over many inputs: every opcode byte after a
    // header, with a few bytes of operands.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        let mut data = vec![0x80, 4];
        for _ in 0..12 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            data.push(seed as u8);
        }
        let _ = pickle::read(&data);
    }
}
