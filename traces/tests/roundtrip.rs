//! Property tests: every record round-trips through the writer and reader,
//! and no byte string makes the reader panic.

use gmem_prof_traces::fast::{self, CrossChecked};
use gmem_prof_traces::record::*;
use gmem_prof_traces::{decode_chunk, read_all, Record, TraceReader, TraceWriter};
use proptest::prelude::*;

fn s() -> impl Strategy<Value = String> {
    proptest::string::string_regex(".{0,12}").unwrap()
}

#[expect(
    clippy::too_many_lines,
    reason = "a strategy for every record kind, one arm each"
)]
fn record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            s(),
            proptest::collection::vec(s(), 0..3),
            any::<u32>(),
            any::<bool>(),
            proptest::collection::vec(any::<u32>(), 0..3)
        )
            .prop_map(|(pid, ppid, t, host, cmdline, v, k, tids)| Record::Process(
                ProcessInfo {
                    pid,
                    ppid,
                    start: Nanos(t),
                    hostname: host.clone(),
                    exe: host,
                    cmdline,
                    collector_version: "0.1".into(),
                    cupti_api_version: v,
                    cupti_path: "/x".into(),
                    driver_version: "580".into(),
                    kernels_traced: k,
                    stacks_captured: !k,
                    cupti_device_buffer_bytes: Bytes(u64::from(v)),
                    collector_tids: tids,
                    kernels_timed: k && v % 2 == 0,
                }
            )),
        (any::<u32>(), s(), any::<u64>(), any::<[u8; 16]>()).prop_map(|(d, n, m, u)| {
            Record::Device(DeviceInfo {
                device: d,
                name: n,
                total_memory: Bytes(m),
                uuid: u,
                compute_major: 9,
                compute_minor: 0,
                multiprocessors: 132,
            })
        }),
        (any::<u32>(), s()).prop_map(|(i, t)| Record::String(StringDef {
            id: StringId(i),
            text: t
        })),
        (
            any::<u32>(),
            s(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..20)
        )
            .prop_map(|(id, path, bias, start, end, build_id)| Record::Module(
                ModuleInfo {
                    id,
                    path,
                    bias,
                    start,
                    end,
                    build_id
                }
            )),
        (
            any::<u32>(),
            any::<bool>(),
            proptest::collection::vec(
                prop_oneof![
                    any::<u64>().prop_map(Frame::Native),
                    (any::<u32>(), any::<u32>()).prop_map(|(c, l)| Frame::Python {
                        code: PyCodeId(c),
                        line: l
                    }),
                ],
                0..40
            )
        )
            .prop_map(|(id, truncated, frames)| Record::Stack(StackDef {
                id: StackId(id),
                frames,
                truncated
            })),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u16>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>()
        )
            .prop_map(
                |(t, d, tid, f, corr, res, bytes, addr, internal)| Record::Api(ApiCall {
                    time: Nanos(t),
                    duration: Nanos(d),
                    tid,
                    func: ApiFunc(f),
                    cbid: corr ^ 7,
                    correlation: corr,
                    result: res,
                    bytes: Bytes(bytes),
                    address: addr,
                    handle: addr ^ bytes,
                    stream: bytes / 3,
                    stack: StackId(tid),
                    internal,
                })
            ),
        (
            any::<u64>(),
            any::<bool>(),
            any::<u8>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u8>(),
            any::<u64>()
        )
            .prop_map(|(t, alloc, kind, addr, bytes, corr, pool_type, pool)| {
                Record::Memory(MemoryEvent {
                    time: Nanos(t),
                    alloc,
                    kind,
                    address: addr,
                    bytes: Bytes(bytes),
                    device: corr % 8,
                    context: corr,
                    stream: corr / 2,
                    correlation: corr,
                    pc: addr / 2,
                    is_async: alloc,
                    pool_type,
                    pool_address: if pool_type != 0 { pool } else { 0 },
                    pool_release_threshold: if pool_type != 0 { pool / 2 } else { 0 },
                    pool_size: if pool_type != 0 { pool / 3 } else { 0 },
                    pool_utilized: if pool_type != 0 { pool / 5 } else { 0 },
                })
            }),
        (any::<u64>(), any::<u8>(), any::<u64>(), any::<u64>()).prop_map(|(t, op, a, sz)| {
            Record::Pool(PoolEvent {
                time: Nanos(t),
                op,
                pool_type: 1,
                address: a,
                size: Bytes(sz),
                release_threshold: sz / 2,
                min_bytes_to_keep: sz / 4,
                utilized: Bytes(sz / 8),
                device: 0,
                correlation: op.into(),
            })
        }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<[u32; 3]>(),
            any::<[u32; 3]>()
        )
            .prop_map(|(t, d, n, g, b)| Record::Kernel(KernelEvent {
                start: Nanos(t),
                end: Nanos(t.wrapping_add(d)),
                name: StringId(n),
                device: 0,
                context: 1,
                stream: 7,
                correlation: n,
                grid: g,
                block: b,
                static_shared: 1,
                dynamic_shared: 2,
                registers: 32,
            })),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<[u32; 3]>(),
            any::<[u32; 3]>()
        )
            .prop_map(|(t, tid, n, g, b)| Record::KernelLaunch(KernelLaunch {
                time: Nanos(t),
                tid,
                name: StringId(n),
                device: 1,
                context: 2,
                stream: 13,
                correlation: n ^ tid,
                grid: g,
                block: b,
                dynamic_shared: tid % 4096,
            })),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(t, c, k)| Record::Dropped(
            DropCounts {
                time: Nanos(t),
                cupti: c,
                collector: k
            }
        )),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u8>(),
            any::<[u64; 4]>(),
            proptest::collection::vec((any::<u32>(), any::<u64>()), 0..4)
        )
            .prop_map(
                |(t, device, reason, b, procs)| Record::DeviceMemory(DeviceMemory {
                    time: Nanos(t),
                    device,
                    reason,
                    total: Bytes(b[0]),
                    used: Bytes(b[1]),
                    free: Bytes(b[2]),
                    reserved: Bytes(b[3]),
                    processes: procs
                        .into_iter()
                        .map(|(pid, used)| ProcessMemory {
                            pid,
                            used: Bytes(used)
                        })
                        .collect(),
                })
            ),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(t, tid, device)| {
            Record::CallDevice(CallDevice {
                time: Nanos(t),
                tid,
                device,
            })
        }),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u8>(),
            any::<u8>(),
            any::<[u64; 4]>()
        )
            .prop_map(
                |(t, device, framework, reason, b)| Record::PoolUsage(PoolUsage {
                    time: Nanos(t),
                    device,
                    framework,
                    reason,
                    in_use: Bytes(b[0]),
                    peak_in_use: Bytes(b[1]),
                    pool: Bytes(b[2]),
                    limit: Bytes(b[3]),
                })
            ),
        (any::<u64>(), any::<u8>(), s()).prop_map(|(t, l, text)| Record::Message(Message {
            time: Nanos(t),
            level: l,
            text
        })),
        any::<u64>().prop_map(|t| Record::ProcessEnd(ProcessEnd { time: Nanos(t) })),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u8>()).prop_map(
            |(t, tid, number, source)| Record::Step(Step {
                time: Nanos(t),
                tid,
                number,
                source,
            })
        ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<[u32; 4]>(),
            any::<u8>()
        )
            .prop_map(|(t, tid, id, n, kind)| Record::RangeBegin(RangeBegin {
                time: Nanos(t),
                tid,
                id,
                domain: StringId(n[0]),
                name: StringId(n[1]),
                kind,
                depth: n[2],
            })),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(t, tid, id)| Record::RangeEnd(
            RangeEnd {
                time: Nanos(t),
                tid,
                id
            }
        )),
        (any::<u64>(), any::<u32>(), any::<[u32; 2]>()).prop_map(|(t, tid, n)| Record::Mark(
            Mark {
                time: Nanos(t),
                tid,
                domain: StringId(n[0]),
                name: StringId(n[1]),
            }
        )),
        (any::<u64>(), any::<bool>(), s()).prop_map(|(t, open, what)| Record::Window(WindowEdge {
            time: Nanos(t),
            open,
            what,
        })),
        (
            any::<u64>(),
            any::<u32>(),
            proptest::collection::vec((s(), s(), any::<u32>(), any::<u32>()), 0..4)
        )
            .prop_map(|(a, m, fr)| Record::Symbol(SymbolInfo {
                address: a,
                module: m,
                module_offset: a / 2,
                frames: fr
                    .into_iter()
                    .map(|(function, file, line, column)| SymbolFrame {
                        function,
                        file,
                        line,
                        column
                    })
                    .collect(),
            })),
        (any::<u32>(), s(), s(), any::<u32>()).prop_map(|(id, file, function, first_line)| {
            Record::PyCode(PyCode {
                id: PyCodeId(id),
                file,
                function,
                first_line,
            })
        }),
        (
            any::<u64>(),
            any::<u8>(),
            1u8..12,
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>()
        )
            .prop_map(|(t, allocator, action, addr, bytes, free, tid)| {
                let action = AllocatorAction(action);
                let oom = action == AllocatorAction::OOM || action == AllocatorAction::OOM_REPORT;
                Record::AllocatorEvent(AllocatorEvent {
                    time: Nanos(t),
                    allocator,
                    action,
                    device: tid % 8,
                    address: addr,
                    bytes: Bytes(bytes),
                    stream: addr / 3,
                    pool: bytes / 5,
                    tid,
                    stack: StackId(tid / 2),
                    device_free: if oom { free } else { 0 },
                    limit: if action == AllocatorAction::OOM_REPORT {
                        free / 2
                    } else {
                        0
                    },
                })
            }),
        (any::<u64>(), any::<u8>(), s(), s(), any::<bool>(), s()).prop_map(
            |(t, allocator, library, settings, attached, detail)| Record::Allocator(
                AllocatorInfo {
                    time: Nanos(t),
                    allocator,
                    library,
                    settings,
                    attached,
                    detail,
                }
            )
        ),
    ]
}

fn write(records: &[(u32, Record)], chunk_target: usize) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.chunk_target = chunk_target;
    for (stream, r) in records {
        w.set_stream(*stream).unwrap();
        w.push(r).unwrap();
    }
    w.finish().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn records_round_trip(records in proptest::collection::vec((0u32..3, record()), 0..60), target in 1usize..4096) {
        let bytes = write(&records, target);
        let (chunks, warnings) = read_all(&bytes).unwrap();
        prop_assert!(warnings.is_empty(), "{:?}", warnings);
        let got: Vec<(u32, Record)> = chunks
            .into_iter()
            .flat_map(|c| { let s = c.stream; c.records.into_iter().map(move |r| (s, r)) })
            .filter(|(_, r)| !matches!(r, Record::Trailer(_)))
            .collect();
        prop_assert_eq!(got, records);
    }

    /// Any prefix of a valid trace reads without panicking, and yields a
    /// prefix of its records (whole chunks only) plus a warning.
    #[test]
    fn truncated_traces_read_up_to_the_last_whole_chunk(records in proptest::collection::vec(record(), 1..40), cut in any::<prop::sample::Index>()) {
        let bytes = write(&records.iter().cloned().map(|r| (0, r)).collect::<Vec<_>>(), 64);
        let cut = 16 + cut.index(bytes.len() - 16);
        let (chunks, warnings) = read_all(&bytes[..cut]).unwrap();
        let got: Vec<Record> = chunks.into_iter().flat_map(|c| c.records).collect();
        prop_assert!(got.len() <= records.len() + 1);
        prop_assert_eq!(&got[..got.len().min(records.len())], &records[..got.len().min(records.len())]);
        if cut < bytes.len() {
            prop_assert!(!warnings.is_empty());
        }
    }

    /// Flipping bytes never panics; damaged chunks are skipped with a warning.
    #[test]
    fn corrupted_traces_never_panic(records in proptest::collection::vec(record(), 1..30), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = write(&records.into_iter().map(|r| (0, r)).collect::<Vec<_>>(), 128);
        for (i, v) in flips {
            let at = 16 + i.index(bytes.len() - 16);
            bytes[at] ^= v | 1;
        }
        let _ = read_all(&bytes);
    }

    /// The optimistic reader (checksums left to the caller) either gives
    /// exactly the careful reader's chunks, or shows the damage: a warning
    /// or a chunk whose checksum fails.
    #[test]
    fn unverified_framing_is_exact_or_shows_the_damage(records in proptest::collection::vec(record(), 1..30), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)) {
        let original = write(&records.into_iter().map(|r| (0, r)).collect::<Vec<_>>(), 128);
        let mut bytes = original.clone();
        for (i, v) in flips {
            let at = 16 + i.index(bytes.len() - 16);
            bytes[at] ^= v | 1;
        }
        let frame = |mut r: TraceReader| {
            let mut offsets = Vec::new();
            let mut all_ok = true;
            while let Some(c) = r.next_chunk() {
                all_ok &= c.checksum_ok();
                offsets.push((c.offset, c.stored.len()));
            }
            (offsets, all_ok, r.warnings)
        };
        let (Ok(careful), Ok(fast)) = (TraceReader::new(&bytes), TraceReader::new(&bytes)) else {
            return Ok(());
        };
        let (careful, careful_ok, _) = frame(careful);
        prop_assert!(careful_ok);
        // The careful reader hands out undamaged chunks only.
        for &(offset, len) in &careful {
            let whole = offset as usize..offset as usize + gmem_prof_traces::file::CHUNK_HEADER_LEN + len;
            prop_assert_eq!(&bytes[whole.clone()], &original[whole]);
        }
        let (fast, fast_ok, fast_warnings) = frame(fast.without_checksums());
        let damage_seen = !fast_ok
            || fast_warnings.iter().any(|w| !matches!(w, gmem_prof_traces::Warning::NoTrailer));
        prop_assert!(damage_seen || fast == careful);
    }

    /// Chunks copied whole from another trace into a new stream, between
    /// records pushed one by one (as `symbolize` merges per-process files),
    /// read back as the same records in the new stream, in order, and the
    /// trailer counts them.
    #[test]
    fn copied_chunks_read_back_in_their_new_stream(records in proptest::collection::vec(record(), 1..40), pushed in proptest::collection::vec(record(), 0..5), target in 1usize..512, into in 1u32..4) {
        let source = write(&records.iter().cloned().map(|r| (0, r)).collect::<Vec<_>>(), target);
        let mut w = TraceWriter::new(Vec::new()).unwrap();
        let mut expected = Vec::new();
        for r in &pushed {
            w.push(r).unwrap();
            expected.push((0, r.clone()));
        }
        w.set_stream(into).unwrap();
        let mut reader = TraceReader::new(&source).unwrap();
        while let Some(raw) = reader.next_chunk() {
            let chunk = decode_chunk(&raw).unwrap();
            let kept: Vec<&Record> = chunk.records.iter().filter(|r| !matches!(r, Record::Trailer(_))).collect();
            if kept.len() == chunk.records.len() {
                w.copy_chunk(into, &raw, kept.len() as u64).unwrap();
            } else {
                for r in &kept {
                    w.push(r).unwrap();
                }
            }
            expected.extend(kept.into_iter().map(|r| (into, r.clone())));
        }
        let merged = w.finish().unwrap();
        let (chunks, warnings) = read_all(&merged).unwrap();
        prop_assert!(warnings.is_empty(), "{:?}", warnings);
        let mut trailer = None;
        let got: Vec<(u32, Record)> = chunks
            .iter()
            .flat_map(|c| c.records.iter().map(move |r| (c.stream, r.clone())))
            .filter(|(_, r)| match r {
                Record::Trailer(t) => { trailer = Some(t.clone()); false }
                _ => true,
            })
            .collect();
        prop_assert_eq!(&got, &expected);
        let trailer = trailer.unwrap();
        prop_assert_eq!(trailer.records, expected.len() as u64 + 1);
        prop_assert_eq!(trailer.chunks, chunks.len() as u64);
    }

    #[test]
    fn random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..2000), header in any::<bool>()) {
        if header && bytes.len() >= 16 {
            bytes[..16].copy_from_slice(&gmem_prof_traces::file_header());
        }
        let _ = read_all(&bytes);
    }
}

#[test]
fn unknown_tags_are_skipped_and_counted() {
    // A record with a tag from the future, framed by hand, between two known ones.
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.push(&Record::ProcessEnd(ProcessEnd { time: Nanos(5) }))
        .unwrap();
    let bytes = w.finish().unwrap();
    let (chunks, _) = read_all(&bytes).unwrap();
    assert_eq!(chunks[0].records.len(), 1);
    let mut payload = gmem_prof_traces::Enc::default();
    payload.var(0);
    payload.u8(200);
    payload.bytes(&[1, 2, 3]);
    payload.u8(gmem_prof_traces::record::tag::PROCESS_END);
    payload.bytes(&[10]);
    let mut file = gmem_prof_traces::file_header().to_vec();
    gmem_prof_traces::file::frame_chunk(0, &payload.buf, false, &mut file);
    let (chunks, warnings) = read_all(&file).unwrap();
    assert_eq!(chunks[0].records[0], Record::Unknown { tag: 200, len: 3 });
    assert_eq!(
        chunks[0].records[1],
        Record::ProcessEnd(ProcessEnd { time: Nanos(5) })
    );
    assert_eq!(warnings, vec![gmem_prof_traces::Warning::NoTrailer]);
}

#[test]
fn newer_versions_are_refused_with_the_version_named() {
    let mut h = gmem_prof_traces::file_header().to_vec();
    h[8] = 9;
    let e = read_all(&h).unwrap_err().to_string();
    assert!(e.contains("version 9"), "{e}");
    assert!(read_all(b"").unwrap_err().to_string().contains("empty"));
    assert!(read_all(b"hello world, not a trace")
        .unwrap_err()
        .to_string()
        .contains("not a gmem-prof trace"));
}

/// A payload holding the record `tag` with `body`, followed by `tail` (the
/// bytes after it in a chunk, here garbage), and what the fast decoder's
/// ways make of it (`fast::cross_check`: they must agree). Returns what the
/// checked decoder gives (`Record::decode`), and how many ways took it.
fn every_way(tag: u8, body: &[u8], tail: &[u8], base: u64) -> (Option<Record>, CrossChecked) {
    let mut payload = gmem_prof_traces::Enc::default();
    payload.var(base);
    payload.u8(tag);
    payload.bytes(body);
    payload.buf.extend_from_slice(tail);
    let seen = fast::cross_check(&payload.buf).unwrap_or_else(|e| panic!("{e}"));
    (Record::decode(tag, body, base).ok(), seen)
}

/// Memory, API and kernel records whose values have the sizes of a real
/// trace's: times near the chunk's base, addresses below 2^49, sizes below
/// 2^35, small ids; every body within 64 bytes, every field within eight.
fn common_record(base: u64) -> impl Strategy<Value = Record> {
    let time = (0..1u64 << 26).prop_map(move |d| Nanos(base.wrapping_add(d)));
    let address = 0..1u64 << 49;
    let size = 0..1u64 << 35;
    let id = 0..1u32 << 21;
    let small = 0..0x80u8;
    prop_oneof![
        (
            time.clone(),
            (any::<bool>(), small.clone(), address.clone(), size.clone()),
            (
                id.clone(),
                id.clone(),
                id.clone(),
                id.clone(),
                address.clone()
            ),
            (
                any::<bool>(),
                small,
                address.clone(),
                size.clone(),
                size.clone(),
                size.clone()
            ),
        )
            .prop_map(
                |(
                    time,
                    (alloc, kind, address, bytes),
                    (device, context, stream, correlation, pc),
                    (is_async, pool_type, pool_address, threshold, pool_size, utilized),
                )| {
                    Record::Memory(MemoryEvent {
                        time,
                        alloc,
                        kind,
                        address,
                        bytes: Bytes(bytes),
                        device,
                        context,
                        stream,
                        correlation,
                        pc,
                        is_async,
                        pool_type,
                        pool_address,
                        pool_release_threshold: threshold,
                        pool_size,
                        pool_utilized: utilized,
                    })
                }
            ),
        (
            time.clone(),
            (
                0..1u64 << 27,
                id.clone(),
                any::<u16>(),
                id.clone(),
                id.clone(),
                id.clone()
            ),
            (
                size.clone(),
                address.clone(),
                address.clone(),
                address,
                id.clone(),
                any::<bool>()
            ),
        )
            .prop_map(
                |(
                    time,
                    (duration, tid, func, cbid, correlation, result),
                    (bytes, address, handle, stream, stack, internal),
                )| {
                    Record::Api(ApiCall {
                        time,
                        duration: Nanos(duration),
                        tid,
                        func: ApiFunc(func),
                        cbid,
                        correlation,
                        result,
                        bytes: Bytes(bytes),
                        address,
                        handle,
                        stream,
                        stack: StackId(stack),
                        internal,
                    })
                }
            ),
        (
            time,
            0..1u64 << 40,
            (id.clone(), id.clone(), id.clone(), id),
            any::<[u32; 6]>()
        )
            .prop_map(|(start, duration, (name, device, context, stream), dims)| {
                Record::Kernel(KernelEvent {
                    start,
                    end: Nanos(start.0.wrapping_add(duration)),
                    name: StringId(name),
                    device,
                    context,
                    stream,
                    correlation: dims[0],
                    grid: [dims[0], dims[1], dims[2]],
                    block: [dims[3], dims[4], dims[5]],
                    ..Default::default()
                })
            }),
    ]
}

/// The records the fast decoder delivers field by field.
const FREQUENT: [u8; 7] = {
    use gmem_prof_traces::record::tag;
    [
        tag::MEMORY,
        tag::API,
        tag::POOL,
        tag::KERNEL,
        tag::KERNEL_LAUNCH,
        tag::ALLOCATOR_EVENT,
        tag::PROCESS_END,
    ]
};

fn frequent_tag() -> impl Strategy<Value = u8> {
    proptest::sample::select(FREQUENT.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The fast decoder's ways (a window with no per-read checks, with
    /// shifts or `pext`, and sixteen fields at a time) agree with the
    /// checked reads on every record body: the same fields from a good one,
    /// an error from a bad one, whatever bytes follow the body.
    #[test]
    fn windowed_decoding_agrees_with_checked(
        r in record(),
        tag in frequent_tag(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        cut in any::<prop::sample::Index>(),
        cut_it in any::<bool>(),
        tail in proptest::collection::vec(any::<u8>(), 192),
        base in any::<u64>(),
    ) {
        use gmem_prof_traces::Enc;
        let (mut out, mut scratch) = (Enc::default(), Enc::default());
        r.encode(&mut out, &mut scratch, base);
        let mut body = scratch.buf.clone();
        // An intact body of a frequent kind is decoded as its own kind (all
        // must give its fields); any other body, edited, cut or of another
        // kind, as a random frequent kind (all must agree, mostly on an
        // error).
        let intact = FREQUENT.contains(&r.tag()) && edits.is_empty() && !cut_it;
        let tag = if intact { r.tag() } else { tag };
        for (i, v) in &edits {
            if !body.is_empty() {
                let at = i.index(body.len());
                body[at] = *v;
            }
        }
        if cut_it {
            body.truncate(cut.index(body.len() + 1));
        }
        prop_assume!(body.len() <= 160);
        let (checked, seen) = every_way(tag, &body, &tail, base);
        // The window was used (a whole one follows every such body here).
        prop_assert!(seen.windowed >= 1);
        if intact {
            prop_assert!(checked.is_some());
        }
    }

    /// The wide decoding takes the records of a real trace and gives what
    /// the scalar decoding gives (`cross_check` holds every way to the
    /// checked one for every body of the tests here).
    #[test]
    fn wide_decoding_takes_common_records(
        (base, r) in any::<u64>().prop_flat_map(|base| (Just(base), common_record(base))),
        tail in proptest::collection::vec(any::<u8>(), 192),
    ) {
        use gmem_prof_traces::Enc;
        let (mut out, mut scratch) = (Enc::default(), Enc::default());
        r.encode(&mut out, &mut scratch, base);
        let (checked, seen) = every_way(r.tag(), &scratch.buf, &tail, base);
        prop_assert!(checked.is_some());
        prop_assert_eq!(seen.windowed, 1);
        if fast::way() == fast::Way::Wide {
            prop_assert_eq!(seen.wide, 1, "the wide way took it");
        }
    }

    /// Bodies of random bytes, including long varints and 0x80 runs.
    #[test]
    fn windowed_decoding_agrees_on_random_bytes(
        tag in frequent_tag(),
        body in proptest::collection::vec(prop_oneof![any::<u8>(), Just(0x80u8), Just(0xffu8), Just(1u8)], 0..160),
        tail in proptest::collection::vec(prop_oneof![any::<u8>(), Just(0x80u8)], 192),
        base in any::<u64>(),
    ) {
        every_way(tag, &body, &tail, base);
    }
}

/// What `fast::decode_payload` delivers, as text, with each record's index.
#[derive(Default)]
struct Delivered(Vec<(u64, String)>);

impl fast::Sink for Delivered {
    fn memory(&mut self, index: u64, m: &MemoryEvent) {
        self.0
            .push((index, format!("{:?}", Record::Memory(m.clone()))));
    }
    fn api(&mut self, index: u64, a: &ApiCall) {
        self.0
            .push((index, format!("{:?}", Record::Api(a.clone()))));
    }
    fn pool(&mut self, index: u64, p: &PoolEvent) {
        self.0
            .push((index, format!("{:?}", Record::Pool(p.clone()))));
    }
    fn kernel(&mut self, index: u64, k: &KernelSpan) {
        self.0.push((index, format!("{k:?}")));
    }
    fn kernel_launch(&mut self, index: u64, k: &KernelLaunch) {
        self.0
            .push((index, format!("{:?}", Record::KernelLaunch(k.clone()))));
    }
    fn allocator_event(&mut self, index: u64, a: &AllocatorEvent) {
        self.0
            .push((index, format!("{:?}", Record::AllocatorEvent(a.clone()))));
    }
    fn process_end(&mut self, index: u64, e: &ProcessEnd) {
        self.0
            .push((index, format!("{:?}", Record::ProcessEnd(e.clone()))));
    }
    fn other(&mut self, index: u64, r: Record) {
        self.0.push((index, format!("{r:?}")));
    }
}

/// What the fast decoder must deliver for `payload`: every record as the
/// checked decoder gives it (a kernel's leading fields only), up to the
/// first that does not decode; and the tag of that one.
fn expected_delivery(payload: &[u8]) -> (Vec<(u64, String)>, Option<u8>) {
    let mut out = Vec::new();
    let mut records = gmem_prof_traces::ChunkRecords::new(payload);
    let base = records.base();
    let mut i = 0u64;
    while let Some(raw) = records.next_raw() {
        let Ok((t, body)) = raw else {
            return (out, Some(0));
        };
        match Record::decode(t, body, base) {
            Ok(Record::Kernel(k)) => out.push((
                i,
                format!(
                    "{:?}",
                    KernelSpan {
                        start: k.start,
                        end: k.end,
                        name: k.name,
                        device: k.device,
                        context: k.context,
                        stream: k.stream,
                    }
                ),
            )),
            Ok(r) => out.push((i, format!("{r:?}"))),
            Err(_) => return (out, Some(t)),
        }
        i += 1;
    }
    (out, None)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The fast decoder's plain API: a chunk of any records, whole or with
    /// a byte changed, gives the sink what the checked decoder gives, in
    /// order with each record's index, and stops with an error where it
    /// stops.
    #[test]
    fn the_fast_decoder_delivers_what_the_checked_one_reads(
        records in proptest::collection::vec(record(), 1..40),
        edit in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
        base in any::<u64>(),
    ) {
        let (mut payload, mut scratch) =
            (gmem_prof_traces::Enc::default(), gmem_prof_traces::Enc::default());
        payload.var(base);
        for r in &records {
            r.encode(&mut payload, &mut scratch, base);
        }
        let mut bytes = payload.buf;
        if let Some((at, v)) = edit {
            let at = at.index(bytes.len());
            bytes[at] = v;
        }
        let mut sink = Delivered::default();
        let read = fast::decode_payload(&bytes, &mut sink);
        let (want, stopped_at) = expected_delivery(&bytes);
        // The fast decoder reads a kernel record's leading fields only:
        // damage in its launch geometry is not its to see.
        prop_assume!(stopped_at != Some(tag::KERNEL));
        prop_assert_eq!(&sink.0, &want);
        prop_assert_eq!(read.records, want.len() as u64);
        prop_assert_eq!(read.error.is_some(), stopped_at.is_some());
        if edit.is_none() {
            prop_assert_eq!(want.len(), records.len());
        }
    }
}

#[test]
fn processes_written_before_kernel_launches_timed_the_kernels_they_traced() {
    for traced in [true, false] {
        let p = ProcessInfo {
            pid: 7,
            kernels_traced: traced,
            kernels_timed: false,
            collector_tids: vec![3, 4],
            ..Default::default()
        };
        let (mut out, mut body) = (
            gmem_prof_traces::Enc::default(),
            gmem_prof_traces::Enc::default(),
        );
        Record::Process(p.clone()).encode(&mut out, &mut body, 0);
        let decode = |b: &[u8]| match Record::decode(tag::PROCESS, b, 0).unwrap() {
            Record::Process(q) => q,
            other => panic!("{other:?}"),
        };
        assert_eq!(decode(&body.buf), p);
        // The body as collectors before `kernels_timed` wrote it: the same
        // without its last byte.
        let old = decode(&body.buf[..body.buf.len() - 1]);
        assert_eq!(old.kernels_timed, traced);
        assert_eq!(old.collector_tids, p.collector_tids);
    }
}
