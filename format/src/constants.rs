//! Constants of the perf data format.
//!
//! From the kernel's `include/uapi/linux/perf_event.h` (kernel record types up to
//! `CALLCHAIN_DEFERRED` 22, sample and read format bits, misc bits),
//! `tools/lib/perf/include/perf/event.h` (user record types up to `SCHEDSTAT_DOMAIN` 86:
//! `COMPRESSED2` 83, `BPF_METADATA` 84, `SCHEDSTAT_CPU` 85) and `tools/perf/util/header.h`
//! (feature ids). Names keep their C spelling without the common prefix.

/// `perf_event_header.type`: the kind of a record. A newtype, not an enum, so that record types this
/// crate does not know still pass through.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordType(pub u32);

macro_rules! record_types {
    ($($name:ident = $value:expr, $text:expr;)*) => {
        impl RecordType {
            $(
                #[doc = concat!("`PERF_RECORD_", stringify!($name), "`")]
                pub const $name: RecordType = RecordType($value);
            )*

            /// The name perf uses in `perf report --stats`, or `None` for an unknown type.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

record_types! {
    MMAP = 1, "MMAP";
    LOST = 2, "LOST";
    COMM = 3, "COMM";
    EXIT = 4, "EXIT";
    THROTTLE = 5, "THROTTLE";
    UNTHROTTLE = 6, "UNTHROTTLE";
    FORK = 7, "FORK";
    READ = 8, "READ";
    SAMPLE = 9, "SAMPLE";
    MMAP2 = 10, "MMAP2";
    AUX = 11, "AUX";
    ITRACE_START = 12, "ITRACE_START";
    LOST_SAMPLES = 13, "LOST_SAMPLES";
    SWITCH = 14, "SWITCH";
    SWITCH_CPU_WIDE = 15, "SWITCH_CPU_WIDE";
    NAMESPACES = 16, "NAMESPACES";
    KSYMBOL = 17, "KSYMBOL";
    BPF_EVENT = 18, "BPF_EVENT";
    CGROUP = 19, "CGROUP";
    TEXT_POKE = 20, "TEXT_POKE";
    AUX_OUTPUT_HW_ID = 21, "AUX_OUTPUT_HW_ID";
    CALLCHAIN_DEFERRED = 22, "CALLCHAIN_DEFERRED";
    HEADER_ATTR = 64, "ATTR";
    HEADER_EVENT_TYPE = 65, "EVENT_TYPE";
    HEADER_TRACING_DATA = 66, "TRACING_DATA";
    HEADER_BUILD_ID = 67, "BUILD_ID";
    FINISHED_ROUND = 68, "FINISHED_ROUND";
    ID_INDEX = 69, "ID_INDEX";
    AUXTRACE_INFO = 70, "AUXTRACE_INFO";
    AUXTRACE = 71, "AUXTRACE";
    AUXTRACE_ERROR = 72, "AUXTRACE_ERROR";
    THREAD_MAP = 73, "THREAD_MAP";
    CPU_MAP = 74, "CPU_MAP";
    STAT_CONFIG = 75, "STAT_CONFIG";
    STAT = 76, "STAT";
    STAT_ROUND = 77, "STAT_ROUND";
    EVENT_UPDATE = 78, "EVENT_UPDATE";
    TIME_CONV = 79, "TIME_CONV";
    HEADER_FEATURE = 80, "FEATURE";
    COMPRESSED = 81, "COMPRESSED";
    FINISHED_INIT = 82, "FINISHED_INIT";
    COMPRESSED2 = 83, "COMPRESSED2";
    BPF_METADATA = 84, "BPF_METADATA";
    SCHEDSTAT_CPU = 85, "SCHEDSTAT_CPU";
    SCHEDSTAT_DOMAIN = 86, "SCHEDSTAT_DOMAIN";
    PIPE_HEADER = 255, "PIPE_HEADER";
}

impl RecordType {
    /// First user (perf-synthesized) record type, `PERF_RECORD_USER_TYPE_START`.
    pub const USER_TYPE_START: u32 = 64;

    /// Whether the kernel emits this type (as opposed to perf synthesizing it).
    pub fn is_kernel(self) -> bool {
        self.0 < Self::USER_TYPE_START
    }
}

impl std::fmt::Debug for RecordType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "type {}", self.0),
        }
    }
}

impl std::fmt::Display for RecordType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// `PERF_RECORD_PIPE_HEADER` is not a perf record type: perfpipe frames the 16-byte
/// `perf_pipe_file_header` as a record of this kind so that it flows through the stages like the rest.
/// It is 255, above every real type, and stays below the runtime's 256 counted kinds.
pub const PIPE_HEADER_KIND: u32 = RecordType::PIPE_HEADER.0;

/// The kind given to records whose type is 254 or more (none is defined): a reader that counts
/// records per kind in a table of 256 (perfpipe's runtime does) files them all under this one, so
/// that no type collides with [`PIPE_HEADER_KIND`]. The span-kind convention for unknown types:
/// `kind = type.min(OTHER_KIND)`.
pub const OTHER_KIND: u32 = 254;

/// Bits of the `perf_event_attr` flags word (C bitfield order, little-endian allocation).
pub mod flag {
    /// `disabled`
    pub const DISABLED: u64 = 1 << 0;
    /// `inherit`
    pub const INHERIT: u64 = 1 << 1;
    /// `mmap`
    pub const MMAP: u64 = 1 << 8;
    /// `comm`
    pub const COMM: u64 = 1 << 9;
    /// `freq`
    pub const FREQ: u64 = 1 << 10;
    /// `enable_on_exec`
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    /// `task`
    pub const TASK: u64 = 1 << 13;
    /// `watermark`
    pub const WATERMARK: u64 = 1 << 14;
    /// `sample_id_all`
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    /// `mmap2`
    pub const MMAP2: u64 = 1 << 23;
    /// `comm_exec`
    pub const COMM_EXEC: u64 = 1 << 24;
    /// `context_switch`: PERF_RECORD_SWITCH (per task) or SWITCH_CPU_WIDE (per cpu) records.
    pub const CONTEXT_SWITCH: u64 = 1 << 26;
    /// `write_backward`
    pub const WRITE_BACKWARD: u64 = 1 << 27;
    /// `build_id`: MMAP2 records carry build ids instead of device and inode.
    pub const BUILD_ID: u64 = 1 << 34;
    /// `defer_callchain`: the user part of a sample's callchain is left to a later
    /// CALLCHAIN_DEFERRED record; the sample ends its callchain with
    /// [`context::USER_DEFERRED`](super::context::USER_DEFERRED) and the cookie (Linux 6.19).
    pub const DEFER_CALLCHAIN: u64 = 1 << 38;
    /// `defer_output`: this event writes the CALLCHAIN_DEFERRED records (perf sets it on its
    /// side-band event, the one with `mmap`/`comm`).
    pub const DEFER_OUTPUT: u64 = 1 << 39;
}

/// Feature ids of the file header's feature bitmap and of HEADER_FEATURE records (`enum HEADER_*`
/// in `tools/perf/util/header.h`, perf 6.1), their names, and which of them a pipe carries.
pub mod feature {
    macro_rules! features {
        ($($name:ident = $value:expr;)*) => {
            $(
                #[doc = concat!("`HEADER_", stringify!($name), "`")]
                pub const $name: u32 = $value;
            )*

            /// The name of a known feature id, as perf spells it without `HEADER_` (`"BUILD_ID"`),
            /// or `None` for an id at or past [`LAST`].
            pub fn name(id: u32) -> Option<&'static str> {
                match id {
                    $($value => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        };
    }

    features! {
        RESERVED = 0;
        TRACING_DATA = 1;
        BUILD_ID = 2;
        HOSTNAME = 3;
        OSRELEASE = 4;
        VERSION = 5;
        ARCH = 6;
        NRCPUS = 7;
        CPUDESC = 8;
        CPUID = 9;
        TOTAL_MEM = 10;
        CMDLINE = 11;
        EVENT_DESC = 12;
        CPU_TOPOLOGY = 13;
        NUMA_TOPOLOGY = 14;
        BRANCH_STACK = 15;
        PMU_MAPPINGS = 16;
        GROUP_DESC = 17;
        AUXTRACE = 18;
        STAT = 19;
        CACHE = 20;
        SAMPLE_TIME = 21;
        MEM_TOPOLOGY = 22;
        CLOCKID = 23;
        DIR_FORMAT = 24;
        BPF_PROG_INFO = 25;
        BPF_BTF = 26;
        COMPRESSED = 27;
        CPU_PMU_CAPS = 28;
        CLOCK_DATA = 29;
        HYBRID_TOPOLOGY = 30;
        PMU_CAPS = 31;
    }

    /// `HEADER_LAST_FEATURE` (perf 6.1): the end of the bitmap's known range, and in pipe mode
    /// the HEADER_FEATURE id that ends the feature records.
    pub const LAST: u32 = 32;

    /// The name of a feature id as perfpipe's messages print it: [`name`], or `feature N` for an
    /// unknown id.
    pub fn display_name(id: u32) -> String {
        name(id).map_or_else(|| format!("feature {id}"), str::to_string)
    }

    /// Whether perf sends this feature as a HEADER_FEATURE record in a pipe (`feat_ops[].synthesize`,
    /// i.e. declared with `FEAT_OPR` in `tools/perf/util/header.c`): every known feature but
    /// TRACING_DATA and BUILD_ID (which have records of their own), BRANCH_STACK, AUXTRACE, STAT,
    /// CACHE, DIR_FORMAT and HYBRID_TOPOLOGY.
    pub fn in_pipe(id: u32) -> bool {
        (HOSTNAME..LAST).contains(&id)
            && !matches!(
                id,
                BRANCH_STACK | AUXTRACE | STAT | CACHE | DIR_FORMAT | HYBRID_TOPOLOGY
            )
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn names_follow_the_enum_and_pipe_features_follow_perf() {
            assert_eq!(name(BUILD_ID), Some("BUILD_ID"));
            assert_eq!(name(PMU_CAPS), Some("PMU_CAPS"));
            assert_eq!((PMU_CAPS, name(LAST)), (31, None));
            assert_eq!(display_name(3), "HOSTNAME");
            assert_eq!(display_name(40), "feature 40");
            let yes: Vec<u32> = (0..40).filter(|&f| in_pipe(f)).collect();
            assert!(yes.contains(&3) && yes.contains(&31) && yes.contains(&27));
            for no in [0, 1, 2, 15, 18, 19, 20, 24, 30, 32, 33] {
                assert!(!yes.contains(&no), "{no}");
            }
        }
    }
}

/// `perf_event_header.misc` bits.
pub mod misc {
    /// `PERF_RECORD_MISC_CPUMODE_MASK`
    pub const CPUMODE_MASK: u16 = 7;
    /// `PERF_RECORD_MISC_CPUMODE_UNKNOWN`
    pub const CPUMODE_UNKNOWN: u16 = 0;
    /// `PERF_RECORD_MISC_KERNEL`
    pub const KERNEL: u16 = 1;
    /// `PERF_RECORD_MISC_USER`
    pub const USER: u16 = 2;
    /// `PERF_RECORD_MISC_HYPERVISOR`
    pub const HYPERVISOR: u16 = 3;
    /// `PERF_RECORD_MISC_GUEST_KERNEL`
    pub const GUEST_KERNEL: u16 = 4;
    /// `PERF_RECORD_MISC_GUEST_USER`
    pub const GUEST_USER: u16 = 5;
    /// `PERF_RECORD_MISC_COMM_EXEC` (COMM), same bit as `MMAP_DATA`, `FORK_EXEC`, `SWITCH_OUT`.
    pub const COMM_EXEC: u16 = 1 << 13;
    /// `PERF_RECORD_MISC_SWITCH_OUT` (SWITCH, SWITCH_CPU_WIDE): a switch out, else in (same bit
    /// as [`COMM_EXEC`]).
    pub const SWITCH_OUT: u16 = 1 << 13;
    /// `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`: the task was preempted (still runnable), same bit
    /// as [`MMAP_BUILD_ID`].
    pub const SWITCH_OUT_PREEMPT: u16 = 1 << 14;
    /// `PERF_RECORD_MISC_MMAP_BUILD_ID` (MMAP2 only): the record carries a build id.
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    /// `PERF_RECORD_MISC_BUILD_ID_SIZE` (HEADER_BUILD_ID only): the size byte is valid.
    pub const BUILD_ID_SIZE: u16 = 1 << 15;

    /// A cpumode of kernel code: the host's kernel or a guest's.
    pub const fn is_kernel(cpumode: u16) -> bool {
        matches!(cpumode, KERNEL | GUEST_KERNEL)
    }
}

/// `perf_event_attr.sample_type` bits (`PERF_SAMPLE_*`).
pub mod sample {
    /// `PERF_SAMPLE_IP`
    pub const IP: u64 = 1 << 0;
    /// `PERF_SAMPLE_TID`
    pub const TID: u64 = 1 << 1;
    /// `PERF_SAMPLE_TIME`
    pub const TIME: u64 = 1 << 2;
    /// `PERF_SAMPLE_ADDR`
    pub const ADDR: u64 = 1 << 3;
    /// `PERF_SAMPLE_READ`
    pub const READ: u64 = 1 << 4;
    /// `PERF_SAMPLE_CALLCHAIN`
    pub const CALLCHAIN: u64 = 1 << 5;
    /// `PERF_SAMPLE_ID`
    pub const ID: u64 = 1 << 6;
    /// `PERF_SAMPLE_CPU`
    pub const CPU: u64 = 1 << 7;
    /// `PERF_SAMPLE_PERIOD`
    pub const PERIOD: u64 = 1 << 8;
    /// `PERF_SAMPLE_STREAM_ID`
    pub const STREAM_ID: u64 = 1 << 9;
    /// `PERF_SAMPLE_RAW`
    pub const RAW: u64 = 1 << 10;
    /// `PERF_SAMPLE_BRANCH_STACK`
    pub const BRANCH_STACK: u64 = 1 << 11;
    /// `PERF_SAMPLE_REGS_USER`
    pub const REGS_USER: u64 = 1 << 12;
    /// `PERF_SAMPLE_STACK_USER`
    pub const STACK_USER: u64 = 1 << 13;
    /// `PERF_SAMPLE_WEIGHT`
    pub const WEIGHT: u64 = 1 << 14;
    /// `PERF_SAMPLE_DATA_SRC`
    pub const DATA_SRC: u64 = 1 << 15;
    /// `PERF_SAMPLE_TRANSACTION`
    pub const TRANSACTION: u64 = 1 << 17;
    /// `PERF_SAMPLE_REGS_INTR`
    pub const REGS_INTR: u64 = 1 << 18;
    /// `PERF_SAMPLE_PHYS_ADDR`
    pub const PHYS_ADDR: u64 = 1 << 19;
    /// `PERF_SAMPLE_CGROUP`
    pub const CGROUP: u64 = 1 << 21;
    /// `PERF_SAMPLE_WEIGHT_STRUCT` (in `WEIGHT`'s place)
    pub const WEIGHT_STRUCT: u64 = 1 << 24;
    /// `PERF_SAMPLE_IDENTIFIER`
    pub const IDENTIFIER: u64 = 1 << 16;
}

/// `perf_event_attr.read_format` bits (`PERF_FORMAT_*`).
pub mod read_format {
    /// `PERF_FORMAT_TOTAL_TIME_ENABLED`
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    /// `PERF_FORMAT_TOTAL_TIME_RUNNING`
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    /// `PERF_FORMAT_ID`
    pub const ID: u64 = 1 << 2;
    /// `PERF_FORMAT_GROUP`
    pub const GROUP: u64 = 1 << 3;
    /// `PERF_FORMAT_LOST`
    pub const LOST: u64 = 1 << 4;
}

/// Callchain context markers (`enum perf_callchain_context`): entries at or above `MAX` switch the
/// cpumode of the frames that follow.
pub mod context {
    /// `PERF_CONTEXT_HV`
    pub const HV: u64 = -32i64 as u64;
    /// `PERF_CONTEXT_KERNEL`
    pub const KERNEL: u64 = -128i64 as u64;
    /// `PERF_CONTEXT_USER`
    pub const USER: u64 = -512i64 as u64;
    /// `PERF_CONTEXT_GUEST`
    pub const GUEST: u64 = -2048i64 as u64;
    /// `PERF_CONTEXT_GUEST_KERNEL`
    pub const GUEST_KERNEL: u64 = -2176i64 as u64;
    /// `PERF_CONTEXT_GUEST_USER`
    pub const GUEST_USER: u64 = -2560i64 as u64;
    /// `PERF_CONTEXT_USER_DEFERRED`: the user frames come later, in the CALLCHAIN_DEFERRED
    /// record whose cookie is the entry after this one (the callchain's last).
    pub const USER_DEFERRED: u64 = -640i64 as u64;
    /// `PERF_CONTEXT_MAX`
    pub const MAX: u64 = -4095i64 as u64;
}

/// The pipe header magic, `PERFILE2` as a little-endian u64.
pub const PIPE_MAGIC: u64 = 0x3245_4c49_4652_4550;
/// Size of `struct perf_pipe_file_header`.
pub const PIPE_HEADER_SIZE: usize = 16;
/// Size of `struct perf_file_header` (file mode).
pub const FILE_HEADER_SIZE: u64 = 104;
/// Size of `struct perf_event_header`.
pub const EVENT_HEADER_SIZE: usize = 8;
