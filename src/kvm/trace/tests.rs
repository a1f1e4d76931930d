//! The tracer's tests: format parsing and decoding on canned records
//! (`unit`), and live traces of this process where tracefs can be had (`live`).

mod unit {
    use super::super::*;

    const SWITCH: &str = "name: sched_switch\nID: 316\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
\nprint fmt: \"prev_comm=%s\", REC->prev_comm\n";

    #[test]
    fn parses_a_format_file() {
        let f = EventFormat::parse(SWITCH).unwrap();
        assert_eq!(f.name, "sched_switch");
        assert_eq!(f.id, 316);
        assert_eq!(
            f.field("prev_comm").unwrap(),
            Field { name: "prev_comm".into(), offset: 8, size: 16, signed: false }
        );
        assert_eq!(f.field("next_pid").unwrap(), Field { name: "next_pid".into(), offset: 56, size: 4, signed: true });
        assert!(f.field("nope").is_err());
    }

    #[test]
    fn reads_signed_and_unsigned_fields() {
        let mut raw = vec![0u8; 64];
        raw[24..28].copy_from_slice(&(-5i32).to_ne_bytes());
        raw[8..11].copy_from_slice(b"abc");
        let f = EventFormat::parse(SWITCH).unwrap();
        assert_eq!(read_int(&raw, &f.field("prev_pid").unwrap()), Some(-5));
        let unsigned = Field { name: "x".into(), offset: 24, size: 4, signed: false };
        assert_eq!(read_int(&raw, &unsigned), Some(u32::MAX as i64 - 4));
        assert_eq!(comm_str(&read_comm(&raw, &f.field("prev_comm").unwrap()).unwrap()), "abc");
        // a field past the end of the record is not read
        assert_eq!(read_int(&raw[..20], &f.field("prev_pid").unwrap()), None);
    }

    #[test]
    fn exit_names_follow_the_print_format() {
        let text = "name: kvm_exit\nID: 9\nformat:\n\
\tfield:unsigned int exit_reason;\toffset:8;\tsize:4;\tsigned:0;\n\
\nprint fmt: \"reason %s\", (REC->isa == 1) ? __print_symbolic(REC->exit_reason & 0xffff, { 0, \"EXCEPTION_NMI\" }, \
{ 30, \"IO_INSTRUCTION\" }) : __print_symbolic(REC->exit_reason, { 0x040 + 14, \"PF excp\" }, { 0x07b, \"io\" }, \
{ -1, \"invalid_guest_state\" }), REC->x\n";
        let f = EventFormat::parse(text).unwrap();
        let n = ExitNames::from_format(&f);
        assert_eq!(n.name(30, Some(1)), "IO_INSTRUCTION");
        assert_eq!(n.name(0x7b, Some(2)), "io");
        assert_eq!(n.name(0x4e, None), "PF excp");
        assert_eq!(n.name(u32::MAX, Some(2)), "invalid_guest_state");
        assert_eq!(n.name(0x999, Some(2)), "reason 0x999");
    }

    #[test]
    fn symbolic_names_concatenate_literals() {
        let f = EventFormat {
            name: "x".into(),
            id: 1,
            fields: vec![],
            print_fmt: "\"%s\", __print_symbolic(REC->reason, { 2, \"KVM_EXIT_\" \"IO\" })".into(),
        };
        assert_eq!(f.symbol_tables(), vec![("REC->reason".to_string(), vec![(2, "KVM_EXIT_IO".to_string())])]);
    }

    /// A decoder state of two tracepoints, `kvm_userspace_exit` (id 7) and
    /// `kvm_fpu` (id 8), from format files of this host's layout.
    fn uexit_fpu_decoding() -> Decoding {
        let uexit = EventFormat::parse(
            "name: kvm_userspace_exit\nID: 7\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:__u32 reason;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:int errno;\toffset:12;\tsize:4;\tsigned:1;\n\
\nprint fmt: \"reason %s\", __print_symbolic(REC->reason, { 2, \"KVM_EXIT_IO\" }, { 6, \"KVM_EXIT_MMIO\" })\n",
        )
        .unwrap();
        let fpu = EventFormat::parse(
            "name: kvm_fpu\nID: 8\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:u32 load;\toffset:8;\tsize:4;\tsigned:0;\n\
\nprint fmt: \"%s\", REC->load ? \"load\" : \"unload\"\n",
        )
        .unwrap();
        let uexit_names = uexit.symbol_tables().into_iter().next().map(|(_, t)| t.into_iter().collect()).unwrap();
        Decoding {
            tracepoints: vec![
                Recorded {
                    id: 7,
                    name: "kvm:kvm_userspace_exit".into(),
                    decoder: Decoder::new(&uexit).unwrap(),
                    seen: 0,
                },
                Recorded { id: 8, name: "kvm:kvm_fpu".into(), decoder: Decoder::new(&fpu).unwrap(), seen: 0 },
            ],
            common_type: uexit.field("common_type").unwrap(),
            exit_names: ExitNames::default(),
            uexit_names,
            reason_index: HashMap::new(),
            comm_index: HashMap::new(),
            traced: vec![true],
            opts: TraceOptions::default(),
            out: Collected::default(),
        }
    }

    fn record(ty: u16, a: u32, b: i32) -> Vec<u8> {
        let mut raw = vec![0u8; 16];
        raw[0..2].copy_from_slice(&ty.to_ne_bytes());
        raw[8..12].copy_from_slice(&a.to_ne_bytes());
        raw[12..16].copy_from_slice(&b.to_ne_bytes());
        raw
    }

    #[test]
    fn exit_reasons_are_interned_once_per_name_and_fpu_puts_are_not_kept() {
        let mut d = uexit_fpu_decoding();
        let eintr = -libc::EINTR;
        for (i, (ty, a, b)) in [
            (7, 2, 0),     // KVM_EXIT_IO
            (8, 1, 0),     // load
            (8, 0, 0),     // put: skipped, not counted
            (7, 2, 0),     // KVM_EXIT_IO again: the same index
            (7, 6, eintr), // restart
            (7, 2, -5),    // error
            (7, 6, -22),   // error, another reason: the same name, the same index
            (7, 99, 0),    // a reason the table lacks
        ]
        .into_iter()
        .enumerate()
        {
            d.sample(i as u64, 0, 1, 1, &record(ty, a, b));
        }
        let reasons: Vec<_> = d
            .out
            .events
            .iter()
            .filter_map(|e| match e.kind {
                Kind::UserspaceExit { reason, .. } => Some(d.out.exit_reasons[reason as usize].as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasons, ["KVM_EXIT_IO", "KVM_EXIT_IO", "restart", "error", "error", "KVM_EXIT 99"]);
        assert_eq!(d.out.exit_reasons, ["KVM_EXIT_IO", "restart", "error", "KVM_EXIT 99"]);
        let fpu: Vec<_> = d.out.events.iter().filter(|e| matches!(e.kind, Kind::Fpu { .. })).collect();
        assert_eq!(fpu.len(), 1);
        assert_eq!(fpu[0].kind, Kind::Fpu { load: true });
        assert_eq!(d.tracepoints[0].seen, 6);
        assert_eq!(d.tracepoints[1].seen, 1, "a put is not counted: the kernel's filter keeps it out where it can");
        // a record of a tracepoint not recorded is ignored
        d.sample(9, 0, 1, 1, &record(5, 2, 0));
        assert_eq!(d.out.events.len(), 7);
    }

    #[test]
    fn an_event_takes_40_bytes() {
        // the memory bound in the docs (max_events × 40 bytes) rests on this
        assert!(std::mem::size_of::<Event>() <= 40, "{}", std::mem::size_of::<Event>());
    }

    fn ev(t: u64, cpu: u32, tid: u32, kind: Kind) -> Event {
        Event { time_ns: t, cpu, tid, kind }
    }

    #[test]
    fn a_capped_trace_ends_each_cpus_frames_at_its_first_dropped_event() {
        // CPU 1 ran the vCPU thread 42, CPU 2 task 9; events of CPU 1's buffer
        // from 2000 on were dropped (the cap), CPU 2's buffer lost nothing, and
        // the window runs to 10000. CPU 1's slice ends at 2000 (not stretched
        // over what was not kept), CPU 2's runs to the end; records pairing
        // several CPUs (here a halt at 5000 in CPU 0's buffer) stop at 2000.
        let sw = |prev: i32, next: i32| Kind::Switch { prev_pid: prev, prev_comm: 0, next_pid: next, next_comm: 0 };
        let c = Collected {
            comms: vec![*b"x\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"],
            cpus: vec![1, 2],
            events: vec![
                ev(0, 1, 7, sw(7, 42)),
                ev(0, 2, 8, sw(8, 9)),
                ev(1000, 1, 42, Kind::VcpuWakeup { ns: 10, waited: true, valid: true }),
                ev(5000, 0, 42, Kind::VcpuWakeup { ns: 10, waited: true, valid: true }),
            ],
            dropped: 3,
            first_dropped_ns: Some(2000),
            first_dropped_by_cpu: [(1, 2000)].into_iter().collect(),
            end_ns: 10_000,
            ..Default::default()
        };
        assert!(c.truncated() && c.complete_until_ns() == 2000);
        let f = Frames::build(&c, 0, 10_000, &[VcpuThread { tid: 42, vm: 0, vcpu: 0 }]);
        assert_eq!(f.t_pcpu, vec![1, 2]);
        assert_eq!(
            (f.t_tid.clone(), f.t_start_ns.clone(), f.t_end_ns.clone()),
            (vec![42, 9], vec![0, 0], vec![2000, 10_000])
        );
        assert_eq!(f.h_time_ns, vec![1000]);
        assert_eq!(f.complete_until_ns, 2000);
        // not capped: the frames run to the window's end
        let whole = Collected { dropped: 0, first_dropped_ns: None, first_dropped_by_cpu: HashMap::new(), ..c };
        assert!(!whole.truncated());
        let f = Frames::build(&whole, 0, 10_000, &[]);
        assert_eq!((f.complete_until_ns, f.t_end_ns), (10_000, vec![10_000, 10_000]));
        // malformed records alone make a trace truncated (gaps with no time bound)
        assert!(Collected { malformed: 1, ..Default::default() }.truncated());
    }

    #[test]
    fn frames_from_events() {
        let c = Collected {
            comms: vec![*b"other\0\0\0\0\0\0\0\0\0\0\0", *b"CPU 0/KVM\0\0\0\0\0\0\0"],
            exit_reasons: vec!["io".into()],
            cpus: vec![1],
            events: vec![
                ev(1000, 1, 7, Kind::Switch { prev_pid: 7, prev_comm: 0, next_pid: 0, next_comm: 0 }),
                ev(1500, 0, 3, Kind::Wakeup { pid: 42, target_cpu: 1 }),
                ev(2000, 1, 0, Kind::Switch { prev_pid: 0, prev_comm: 0, next_pid: 42, next_comm: 1 }),
                // a wake-up of a thread that is running is no wake-up-to-run row
                ev(2050, 0, 3, Kind::Wakeup { pid: 42, target_cpu: 1 }),
                ev(2100, 1, 42, Kind::KvmExit { reason: 0, vcpu_id: 0 }),
                ev(2300, 1, 42, Kind::KvmEntry { vcpu_id: 0 }),
                ev(2400, 1, 42, Kind::HaltPollNs { vcpu_id: 0, new: 10000, old: 0, grow: true }),
                ev(2500, 1, 42, Kind::VcpuWakeup { ns: 300, waited: false, valid: true }),
                ev(2600, 1, 42, Kind::KvmExit { reason: 0, vcpu_id: 0 }),
            ],
            ..Default::default()
        };
        let f = Frames::build(&c, 500, 3000, &[VcpuThread { tid: 42, vm: 0, vcpu: 0 }]);
        // task 7 from the window's start to 1000; idle (pid 0) is no row; the vCPU thread to the end
        assert_eq!(f.t_tid, vec![7, 42]);
        assert_eq!(f.t_start_ns, vec![0, 1500]);
        assert_eq!(f.t_end_ns, vec![500, 2500]);
        assert_eq!(f.t_vm, vec![-1, 0]);
        assert_eq!(f.t_comm, vec!["other", "CPU 0/KVM"]);
        assert_eq!((f.w_wake_ns.clone(), f.w_run_ns.clone()), (vec![1000], vec![1500]));
        assert_eq!(f.e_exit_ns, vec![1600, 2100]);
        assert_eq!(f.e_entry_ns, vec![1800, NONE]);
        assert_eq!((f.h_polled.clone(), f.h_ns.clone(), f.h_window_ns.clone()), (vec![true], vec![300], vec![10000]));
        assert_eq!(f.inferred_switch_ins, 0);
    }

    fn row(tid: u32, entry_ns: u64, exit_ns: u64) -> LoopRow {
        LoopRow { tid, entry_ns, exit_ns, reason: "KVM_EXIT_IO" }
    }

    /// The run loop's rows: each `KVM_RUN`'s return opens an exit's row, the
    /// next issue closes it; merged in time order with the kernel's records,
    /// on no CPU (nothing is inferred from them), counted per `KVM_RUN`.
    #[test]
    fn run_loop_rows_are_the_exits_where_no_kvm_exit_fires() {
        let log = ExitLog::new(100);
        log.record(row(42, 1000, 1200));
        log.record(LoopRow { tid: 42, entry_ns: 1300, exit_ns: 1700, reason: "restart" });
        log.record(row(42, 1750, 2600));
        log.record(row(99, 1100, 1150)); // not a vCPU thread of the frames
        let mut c = Collected {
            cpus: vec![1],
            events: vec![ev(1500, 1, 42, Kind::VcpuWakeup { ns: 10, waited: false, valid: true })],
            kvm_events: true,
            end_ns: 3000,
            ..Default::default()
        };
        c.add_run_loop(log.close(), 100);
        assert!(log.is_closed());
        log.record(row(42, 2700, 2800)); // after the stop: not kept
        assert!(log.close().rows.is_empty());
        assert_eq!(c.events.len(), 9);
        assert!(c.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        assert_eq!(c.counts["vcpulab:kvm_run"], 4);
        assert_eq!(c.exit_reasons, vec!["KVM_EXIT_IO", "restart"]);
        let f = Frames::build(&c, 0, 3000, &[VcpuThread { tid: 42, vm: 0, vcpu: 3 }]);
        assert_eq!(f.exits_source, "run_loop");
        assert_eq!(f.e_exit_ns, vec![1200, 1700, 2600]);
        assert_eq!(f.e_entry_ns, vec![1300, 1750, NONE]);
        assert_eq!(f.e_reason, vec!["KVM_EXIT_IO", "restart", "KVM_EXIT_IO"]);
        assert_eq!((f.e_vm.clone(), f.e_vcpu.clone()), (vec![0; 3], vec![3; 3]));
        assert_eq!(f.h_time_ns, vec![1500]);
        assert_eq!(f.inferred_switch_ins, 0);
        // where kvm_exit fires for the thread (hardware virtualisation), it stays the source
        c.exit_reasons.push("IO_INSTRUCTION".into());
        c.events.insert(0, ev(900, 1, 42, Kind::KvmExit { reason: 2, vcpu_id: 3 }));
        c.events.insert(1, ev(950, 1, 42, Kind::KvmEntry { vcpu_id: 3 }));
        let f = Frames::build(&c, 0, 3000, &[VcpuThread { tid: 42, vm: 0, vcpu: 3 }]);
        assert_eq!((f.exits_source, f.e_exit_ns, f.e_entry_ns), ("kvm_exit", vec![900], vec![950]));
    }

    /// One cap for the kernel's events and the run loop's together: past it
    /// the latest events go and the frames are cut where the first went.
    #[test]
    fn the_cap_holds_for_the_run_loops_rows_too() {
        let log = ExitLog::new(2);
        for i in 0..4 {
            log.record(row(42, 1000 * i + 100, 1000 * i + 600));
        }
        let mut c = Collected {
            cpus: vec![1],
            events: vec![
                ev(50, 1, 0, Kind::Switch { prev_pid: 0, prev_comm: 0, next_pid: 42, next_comm: 0 }),
                ev(2200, 1, 42, Kind::Switch { prev_pid: 42, prev_comm: 0, next_pid: 0, next_comm: 0 }),
            ],
            kvm_events: true,
            end_ns: 5000,
            ..Default::default()
        };
        c.add_run_loop(log.close(), 5);
        // the log kept 2 rows (4 events) and dropped the row issued at 2100; the cap
        // of 5 then dropped the kernel's switch at 2200
        assert_eq!(c.events.len(), 5);
        assert_eq!(c.dropped, 2 + 1);
        assert_eq!(c.first_dropped_ns, Some(2100));
        assert_eq!(c.first_dropped_by_cpu.get(&1), Some(&2200));
        assert!(c.truncated());
        let f = Frames::build(&c, 0, 5000, &[VcpuThread { tid: 42, vm: 0, vcpu: 0 }]);
        assert_eq!(f.complete_until_ns, 2100);
        assert_eq!(f.e_exit_ns, vec![600, 1600]);
        assert_eq!(f.e_entry_ns, vec![1100, NONE]);
    }

    #[test]
    fn a_run_loops_reason_is_the_kernels_name() {
        use crate::kvm::exit::{Exit, IoDir};
        let io = Exit::Io { port: 0x80, size: 1, count: 1, dir: IoDir::Out, data: vec![0] };
        assert_eq!(reason_name(&Ok(io)), "KVM_EXIT_IO");
        assert_eq!(reason_name(&Ok(Exit::Interrupted)), "restart");
        assert_eq!(reason_name(&Ok(Exit::Hlt)), "KVM_EXIT_HLT");
        assert_eq!(reason_name(&Err(crate::kvm::Error::Closed("x"))), "error");
        let hc = Exit::Other { reason: kvm_bindings::KVM_EXIT_HYPERCALL, name: "hypercall" };
        assert_eq!(reason_name(&Ok(hc)), "KVM_EXIT_HYPERCALL");
    }

    /// A CPU leaving idle without a traced switch: the vCPU's own records prove it ran.
    #[test]
    fn infers_switch_ins_the_kernel_did_not_trace() {
        let c = Collected {
            comms: vec![*b"swapper/1\0\0\0\0\0\0\0", *b"CPU 0/KVM\0\0\0\0\0\0\0"],
            cpus: vec![1],
            events: vec![
                ev(1000, 1, 42, Kind::Switch { prev_pid: 42, prev_comm: 1, next_pid: 0, next_comm: 0 }),
                // woken from idle; the switch idle -> 42 is missing
                ev(1900, 1, 0, Kind::Wakeup { pid: 42, target_cpu: 1 }),
                ev(2000, 1, 42, Kind::VcpuWakeup { ns: 1000, waited: true, valid: true }),
                ev(2030, 1, 42, Kind::Switch { prev_pid: 42, prev_comm: 1, next_pid: 0, next_comm: 0 }),
                // no wake-up traced either: the slice is still inferred from the halt's record
                ev(3000, 1, 42, Kind::VcpuWakeup { ns: 970, waited: true, valid: true }),
                ev(3020, 1, 42, Kind::Switch { prev_pid: 42, prev_comm: 1, next_pid: 0, next_comm: 0 }),
                // a record of the idle task itself on a CPU the trace shows idle: nothing inferred
                ev(3500, 1, 0, Kind::Wakeup { pid: 42, target_cpu: 1 }),
            ],
            ..Default::default()
        };
        let f = Frames::build(&c, 0, 4000, &[VcpuThread { tid: 42, vm: 0, vcpu: 0 }]);
        assert_eq!(f.t_tid, vec![42, 42, 42]);
        assert_eq!(f.t_start_ns, vec![0, 2000, 3000]);
        assert_eq!(f.t_end_ns, vec![1000, 2030, 3020]);
        assert_eq!(f.t_comm, vec!["CPU 0/KVM"; 3]);
        assert_eq!((f.w_wake_ns.clone(), f.w_run_ns.clone()), (vec![1900], vec![2000]));
        assert_eq!(f.inferred_switch_ins, 2);
    }
}

mod live {
    use super::super::*;
    use std::time::Duration;

    /// Records this thread's own switches on CPU 0 (skips where tracefs cannot be had).
    #[test]
    fn records_switches_and_closes_its_fds() {
        // perf fds only: other tests of this process open and close fds concurrently
        let fds = || {
            std::fs::read_dir("/proc/self/fd")
                .map(|d| {
                    d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                        .filter(|t| t.to_string_lossy().contains("perf_event"))
                        .count()
                })
                .unwrap_or(0)
        };
        let before = fds();
        let opts = TraceOptions { kvm_pid: Some(std::process::id() as i32), ..Default::default() };
        let t = match Tracer::start(&[0], opts) {
            Err(Error::TraceUnavailable(why)) => {
                eprintln!("skipped: {why}");
                return;
            }
            t => t.expect("tracer starts"),
        };
        assert!(fds() > before);
        crate::kvm::os::pin_current_thread(&[0]).unwrap();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let c = t.stop().unwrap();
        assert_eq!(fds(), before, "every perf fd is closed after stop");
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let mine = c
            .events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Switch { prev_pid, .. } if prev_pid == me) && e.cpu == 0)
            .count();
        assert!(mine >= 20, "each sleep switches this thread out on CPU 0: {mine}");
        assert!(c.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        assert!(c.events.iter().all(|e| e.time_ns >= c.start_ns && e.time_ns <= c.end_ns));
        // the cap is kept and flagged
        let t = Tracer::start(&[0], TraceOptions { max_events: 1, ..Default::default() }).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let c = t.stop().unwrap();
        assert_eq!(c.events.len(), 1);
        assert!(c.truncated() && c.dropped > 0);
        assert!(matches!(Tracer::start(&[100_000], TraceOptions::default()), Err(Error::InvalidArgument(_))));
        // dropped without stop: fds closed too
        drop(Tracer::start(&[0], TraceOptions::default()).unwrap());
        assert_eq!(fds(), before);
    }
}
