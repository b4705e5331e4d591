//! What the daemon and its clients agree on: the error kinds of the API, each with its one
//! HTTP status and stable machine code, and the names of the fields of its JSON requests and
//! answers, one module per answer (docs/openapi.yaml lists both). The daemon writes with
//! these names and the CLI reads with them, so a field cannot be renamed on one side only.

/// One table: kind, HTTP status, code. The code is the API's contract (scripts match on it);
/// the status follows from it.
macro_rules! kinds {
    ($($kind:ident = $status:literal $code:literal,)*) => {
        /// Why an API request failed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorKind {
            $($kind,)*
        }

        impl ErrorKind {
            /// Every kind, in the table's order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind,)*];

            pub fn status(self) -> u16 {
                match self {
                    $(ErrorKind::$kind => $status,)*
                }
            }

            pub fn code(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => $code,)*
                }
            }

            pub fn from_code(code: &str) -> Option<ErrorKind> {
                match code {
                    $($code => Some(ErrorKind::$kind),)*
                    _ => None,
                }
            }
        }
    };
}

kinds! {
    // The request itself.
    BadRequest = 400 "bad_request",
    Forbidden = 403 "forbidden",
    NotPermitted = 403 "not_permitted",
    NotFound = 404 "not_found",
    MethodNotAllowed = 405 "method_not_allowed",
    RateLimited = 429 "rate_limited",
    // Packages and containers.
    NotInstalled = 404 "not_installed",
    UnknownPackage = 404 "unknown_package",
    NoSuchReport = 404 "no_such_report",
    NoSuchSchedule = 404 "no_such_schedule",
    ReadOnly = 403 "read_only",
    TooManySchedules = 409 "too_many_schedules",
    AlreadyRunning = 409 "already_running",
    NotRunning = 409 "not_running",
    Running = 409 "running",
    NoPrevious = 409 "no_previous",
    Needed = 409 "needed",
    MissingLayer = 409 "missing_layer",
    NotBound = 404 "not_bound",
    AlreadyBound = 409 "already_bound",
    TargetTaken = 409 "target_taken",
    // The device policy and the kernel say no.
    Refused = 409 "refused",
    BeyondPolicy = 409 "beyond_policy",
    NoDevice = 409 "no_device",
    NoIds = 409 "no_ids",
    NoUserns = 409 "no_userns",
    SharedUnscoped = 409 "shared_unscoped",
    Untraversable = 409 "untraversable",
    PoolExhausted = 409 "pool_exhausted",
    PortTaken = 409 "port_taken",
    SafeMode = 409 "safe_mode",
    UpdateLocked = 409 "update_locked",
    // The repository.
    NoRepository = 412 "no_repository",
    NoKeys = 412 "no_keys",
    NoIndex = 412 "no_index",
    BadIndex = 422 "bad_index",
    BadSignature = 422 "bad_signature",
    Expired = 422 "expired",
    Rollback = 422 "rollback",
    BadImage = 422 "bad_image",
    BadManifest = 422 "bad_manifest",
    FetchFailed = 502 "fetch_failed",
    // The device could not do it.
    Internal = 500 "internal",
    BadCache = 500 "bad_cache",
    BadKey = 500 "bad_key",
    NoCgroups = 500 "no_cgroups",
    LimitFailed = 500 "limit_failed",
    MountFailed = 500 "mount_failed",
    StartFailed = 500 "start_failed",
    StopFailed = 500 "stop_failed",
    Network = 500 "network",
    Apparmor = 500 "apparmor",
    Busy = 503 "busy",
    NoSpace = 507 "no_space",
}

/// Names that several answers carry with the same meaning; each answer's module re-exports
/// the ones it has.
pub mod common {
    /// A package's name (and its container's).
    pub const NAME: &str = "name";
    /// A package's version.
    pub const VERSION: &str = "version";
    /// An image's size in bytes.
    pub const SIZE: &str = "size";
    /// One entry per container.
    pub const CONTAINERS: &str = "containers";
    /// PID (in the host's namespace) of a container's init.
    pub const INIT_PID: &str = "init_pid";
    /// When a container started, in seconds since the epoch.
    pub const STARTED_AT: &str = "started_at";
    /// How long a container has run, in seconds, by the boot-relative clocks.
    pub const UPTIME_S: &str = "uptime_s";
    /// Bytes a container has written to its log in total (not only those in the ring).
    pub const LOG_BYTES: &str = "log_bytes";
    /// The installed packages for which the index lists a higher version ([`upgradable`](super::upgradable)).
    pub const UPGRADABLE: &str = "upgradable";
    /// The repository index's serial.
    pub const SERIAL: &str = "serial";
    /// When the repository index expires (seconds since the epoch), or null.
    pub const EXPIRES: &str = "expires";
    /// The number of CPUs of the host.
    pub const CPUS: &str = "cpus";
    /// A CPU quota, in percent of one CPU.
    pub const CPU_MAX_PERCENT: &str = "cpu_max_percent";
    /// A memory limit, in bytes.
    pub const MEMORY_MAX: &str = "memory_max";
    /// A limit on the number of processes.
    pub const PIDS_MAX: &str = "pids_max";
}

/// The container API's answers (docs/container-api.yaml).
pub mod selfapi {
    pub use super::common::NAME;
    /// The operation accepted: `stop` or `restart` (it happens after the answer).
    pub const ACCEPTED: &str = "accepted";
    /// What the package asked for and what the device policy granted.
    pub const PERMISSIONS: &str = "permissions";
    /// The permissions the manifest asks for (`[permissions] api`).
    pub const ASKED: &str = "asked";
    /// The permissions granted of those.
    pub const GRANTED: &str = "granted";
    /// In a `not_permitted` error: the permission the request needs.
    pub const PERMISSION: &str = "permission";
    /// The container's usage (`berth stats` of it), or null without cgroups.
    pub const USAGE: &str = "usage";
    /// Its network: mode, published ports, address and MAC (`berth net` of it).
    pub const ADDRESSES: &str = "addresses";
    /// Until when upgrades of the package are held off (seconds since the epoch), or null.
    pub const LOCKED_UNTIL: &str = "locked_until";
    /// The keep-alive period of `[health] watchdog` in milliseconds, or null.
    pub const WATCHDOG_MS: &str = "watchdog_ms";
    /// The health the package reported: true (healthy) or false.
    pub const OK: &str = "ok";
    /// The message it reported with it, or null.
    pub const MESSAGE: &str = "message";
}

/// `GET /v1/ping`.
pub mod ping {
    /// Always true: the daemon answers.
    pub const OK: &str = "ok";
}

/// The body of every failed request (and of the install stream's `error` event).
pub mod error {
    /// The message for people.
    pub const ERROR: &str = "error";
    /// The stable machine code ([`ErrorKind::code`](super::ErrorKind::code)).
    pub const CODE: &str = "code";
    /// With `429 rate_limited`: milliseconds until the request may be made again (the
    /// `Retry-After` header says the same in whole seconds, rounded up).
    pub const RETRY_AFTER_MS: &str = "retry_after_ms";
}

/// The bodies of the requests (and the `?name=` of those that take a query).
pub mod request {
    pub use super::common::NAME;
    /// install, remove: the packages.
    pub const NAMES: &str = "names";
    /// remove: also delete each package's /data.
    pub const PURGE: &str = "purge";
    /// stop: seconds between SIGTERM and SIGKILL.
    pub const TIMEOUT: &str = "timeout";
    /// update: accept a serial below the newest accepted.
    pub const RESET_SERIAL: &str = "reset_serial";
    /// limit: the CPU quota, `"20%"` of one CPU.
    pub const CPU: &str = "cpu";
    /// limit: the memory limit, a size such as `"32M"`.
    pub const MEMORY: &str = "memory";
    /// limit: the process limit.
    pub const PIDS: &str = "pids";
    /// limit: the bandwidth cap from the container, a rate such as `"8mbit"`, or `"none"`.
    pub const EGRESS: &str = "egress";
    /// limit: the bandwidth cap to the container, as `egress`.
    pub const INGRESS: &str = "ingress";
    /// test/stall (test hooks only): which part of the daemon to stall, `api` or
    /// `supervisor`.
    pub const COMPONENT: &str = "component";
    /// test/stall (test hooks only): for how many seconds.
    pub const SECONDS: &str = "seconds";
    /// `POST /v1/upgrade`: go past the packages' update locks.
    pub const FORCE: &str = "force";
    /// reports: one report's id.
    pub const ID: &str = "id";
    /// reports remove: every report.
    pub const ALL: &str = "all";
    /// start: answer with when each step of the start happened ([`start::TRACE`]).
    pub const TRACE: &str = "trace";
    pub use super::bind::{AT, CONTAINER, PACKAGE, PERSIST};
}

/// `GET /v1/status`: the daemon, the cached repository index and the containers.
pub mod status {
    pub use super::common::CONTAINERS;
    /// The cached repository index ([`repository`](super::repository)).
    pub const REPOSITORY: &str = "repository";
    /// The daemon itself ([`daemon`](super::daemon)).
    pub const DAEMON: &str = "daemon";
    /// The fleet client ([`fleet`](super::fleet)), null without `[fleet]`.
    pub const FLEET: &str = "fleet";
}

/// The fleet client in `GET /v1/status` (docs/fleet.md).
pub mod fleet {
    pub use super::common::VERSION;
    /// The DDI server and tenant polled.
    pub const SERVER: &str = "server";
    pub const TENANT: &str = "tenant";
    /// This device's controller id.
    pub const CONTROLLER_ID: &str = "controller_id";
    /// When the last poll succeeded / when the next one is due (UNIX s).
    pub const LAST_POLL: &str = "last_poll";
    pub const NEXT_POLL: &str = "next_poll";
    /// Polls since the daemon started.
    pub const POLLS: &str = "polls";
    /// Why the last poll failed, or null.
    pub const LAST_ERROR: &str = "last_error";
    /// The version of the last bundle applied with success (what the server sees as
    /// `sw_version`).
    pub const SW_VERSION: &str = "sw_version";
    /// The action in hand or last finished: id, version, phase (downloading, downloaded,
    /// applying, finished), success, reported, details.
    pub const ACTION: &str = "action";
    pub const ID: &str = "id";
    pub const PHASE: &str = "phase";
    pub const SUCCESS: &str = "success";
    pub const REPORTED: &str = "reported";
    pub const DETAILS: &str = "details";
}

/// The daemon in `GET /v1/status`.
pub mod daemon {
    /// The daemon's pid.
    pub const PID: &str = "pid";
    /// berth's version.
    pub const VERSION: &str = "version";
    /// Seconds since the daemon started.
    pub const UPTIME_S: &str = "uptime_s";
    /// Where the containers' LXC directories are.
    pub const LXCPATH: &str = "lxcpath";
    /// Set while the state partition has less free than `[upgrade] reserve`: what is left
    /// and who fills it; else null.
    pub const SPACE_WARNING: &str = "space_warning";
    pub use super::safe_mode::{SAFE_MODE, SAFE_MODE_REASON};
}

/// `POST /v1/safe-mode/enter` and `/clear`; the first two are also in the daemon's status.
pub mod safe_mode {
    pub use super::common::CONTAINERS;
    /// Whether the daemon is in safe mode: no image mounted, no container started.
    pub const SAFE_MODE: &str = "safe_mode";
    /// Why (the unconfirmed starts and the containers that ran in them, or the operator's
    /// `berth safe-mode enter`), or null.
    pub const SAFE_MODE_REASON: &str = "safe_mode_reason";
}

/// The cached repository index in `GET /v1/status` (read for display, not verified).
pub mod repository {
    pub use super::common::{EXPIRES, SERIAL};
    /// The repository's URL.
    pub const URL: &str = "url";
    /// When the index was fetched, in seconds since the epoch.
    pub const FETCHED_AT: &str = "fetched_at";
    /// Seconds since the index was fetched.
    pub const AGE_S: &str = "age_s";
    /// Why the index needs an update (expired, too old, none yet), or null.
    pub const WARNING: &str = "warning";
}

/// One container in `GET /v1/status`.
pub mod container {
    pub use super::common::{INIT_PID, LOG_BYTES, NAME, STARTED_AT, UPTIME_S, VERSION};
    /// The supervisor's state: `running`, `starting`, `unhealthy`, `backoff`, `failed`,
    /// `stopping`, `stopped`.
    pub const STATE: &str = "state";
    /// Restarts the supervisor made since the operator last started it.
    pub const RESTARTS: &str = "restarts";
    /// TR-181 `RetryCount`: retries counted towards `failed` (back to 0 after a run of the
    /// reset period).
    pub const RETRIES: &str = "retries";
    /// Ready for the containers that depend on it: running, and its first health check
    /// passed (or it has none).
    pub const READY: &str = "ready";
    /// Milliseconds until a restart held in backoff, or null.
    pub const RESTART_IN_MS: &str = "restart_in_ms";
    /// Why it is failed, or why it last failed, or null.
    pub const REASON: &str = "reason";
    /// Its health probe's view ([`health`](super::health)), or null without `[health]`.
    pub const HEALTH: &str = "health";
    /// The package's network mode.
    pub const NETWORK: &str = "network";
    /// Whether the daemon starts it again when it starts.
    pub const AUTOSTART: &str = "autostart";
    /// How it last ended ([`exit`](super::exit)), or null.
    pub const LAST_EXIT: &str = "last_exit";
    /// The memory guard's last kill in it ([`guard_kill`](super::guard_kill)), or null.
    pub const GUARD_KILL: &str = "guard_kill";
    /// The sha256 of its package's image.
    pub const IMAGE: &str = "image";
    /// The packages bound into it ([`bind`](super::bind)): while it runs, those of this
    /// run; otherwise those its next start makes (persistent and manifest ones).
    pub const BINDINGS: &str = "bindings";
}

/// `POST /v1/bind` and `/v1/unbind` (their requests too), and each binding in `status`.
pub mod bind {
    pub use super::common::VERSION;
    /// The package bound.
    pub const PACKAGE: &str = "package";
    /// The container it is bound into.
    pub const CONTAINER: &str = "container";
    /// The path inside the container.
    pub const AT: &str = "at";
    /// Kept for the container's next starts (`--persist`).
    pub const PERSIST: &str = "persist";
    /// `mount-api`, `propagation` or `start`; null for a binding of the next start.
    pub const METHOD: &str = "method";
    /// `operator`, or `manifest` (the container's `[[bind]]`).
    pub const ORIGIN: &str = "origin";
    /// Milliseconds the bind took.
    pub const BIND_MS: &str = "bind_ms";
    /// unbind: whether a mount was removed (the container was running with it).
    pub const UNMOUNTED: &str = "unmounted";
    /// Milliseconds the unbind took.
    pub const UNBIND_MS: &str = "unbind_ms";
}

/// `POST /v1/reset`'s answer.
pub mod reset {
    pub use super::common::NAME;
    /// The container's state after the reset (`stopped`, or `running` if it runs).
    pub const STATE: &str = "state";
}

/// A container's health checks, in `GET /v1/status`.
pub mod health {
    /// `starting` (no result in this run yet), `healthy`, `unhealthy`.
    pub const STATUS: &str = "status";
    /// Failed checks in a row.
    pub const FAILURES: &str = "failures";
    /// The last probe's verdict and output, or null.
    pub const LAST: &str = "last";
    /// When the last probe ended, in seconds since the epoch, or null.
    pub const CHECKED_AT: &str = "checked_at";
}

/// How a container ended: the exit record its shim writes, in `status` and `stop`.
pub mod exit {
    pub use super::common::{LOG_BYTES, STARTED_AT};
    /// The payload's exit code, or null if a signal ended it.
    pub const CODE: &str = "code";
    /// The signal that ended it, or null.
    pub const SIGNAL: &str = "signal";
    /// Whether the payload dumped core, or null when not known.
    pub const CORE_DUMPED: &str = "core_dumped";
    /// When it ended, in seconds since the epoch.
    pub const STOPPED_AT: &str = "stopped_at";
    /// Why `berth stop` killed it (it outlived the timeout); absent otherwise.
    pub const KILLED: &str = "killed";
}

/// The memory guard's last kill in a container, in `GET /v1/status`.
pub mod guard_kill {
    /// When, in seconds since the epoch.
    pub const AT: &str = "at";
    /// The process killed (host pid).
    pub const PID: &str = "pid";
    /// Whether it was the container's init (the whole container ended with it).
    pub const INIT: &str = "init";
    /// Its resident memory, in bytes.
    pub const RSS: &str = "rss";
    /// Its package's `[resources] priority`.
    pub const PRIORITY: &str = "priority";
    /// MemAvailable when it was chosen, in bytes.
    pub const AVAILABLE: &str = "available";
    /// The guard's threshold, in bytes.
    pub const THRESHOLD: &str = "threshold";
    /// The guard's kills in this container since the device booted (this one included).
    pub const COUNT: &str = "count";
}

/// `GET /v1/packages`.
pub mod list {
    pub use super::common::UPGRADABLE;
    /// The installed packages ([`package`](super::package)).
    pub const INSTALLED: &str = "installed";
    /// The packages of the cached index ([`package`](super::package)).
    pub const AVAILABLE: &str = "available";
    /// Why `available` and `upgradable` are empty, or null.
    pub const INDEX_NOTE: &str = "index_note";
}

/// One package of `GET /v1/packages`, installed or available.
pub mod package {
    pub use super::common::{NAME, SIZE, VERSION};
    /// The manifest's description.
    pub const DESCRIPTION: &str = "description";
    /// Installed: installed by name, not only as a dependency.
    pub const EXPLICIT: &str = "explicit";
    /// Installed: the sha256 of its image.
    pub const SHA256: &str = "sha256";
    /// Available: the installed version, or null.
    pub const INSTALLED: &str = "installed";
}

/// An installed package the index has a higher version of (`packages`, `update`).
pub mod upgradable {
    pub use super::common::NAME;
    /// The version installed.
    pub const INSTALLED: &str = "installed";
    /// The version the index offers.
    pub const AVAILABLE: &str = "available";
}

/// `POST /v1/update`.
pub mod update {
    pub use super::common::{EXPIRES, SERIAL, UPGRADABLE};
    /// The repository's URL.
    pub const REPOSITORY: &str = "repository";
    /// The number of packages in the index.
    pub const PACKAGES: &str = "packages";
    /// The source said index.json and its signature are unchanged since the cached copy
    /// (304 Not Modified to `If-None-Match`).
    pub const UNCHANGED: &str = "unchanged";
}

/// `POST /v1/install`: the stream's events and, in its `done` event, the result.
pub mod install {
    pub use super::common::{NAME, SIZE, VERSION};
    pub use super::error::{CODE, ERROR};
    /// The kind of event: progress, fetched, done or error.
    pub const EVENT: &str = "event";
    /// progress, fetched: the package whose image it is.
    pub const PACKAGE: &str = "package";
    /// progress: bytes received so far.
    pub const DONE: &str = "done";
    /// progress: the image's size the index gives.
    pub const TOTAL: &str = "total";
    /// done: the result.
    pub const RESULT: &str = "result";
    /// error: the HTTP status the error would have had.
    pub const STATUS: &str = "status";
    /// The result: the packages newly installed or replaced (name, version).
    pub const INSTALLED: &str = "installed";
    /// The result: the packages already installed with the same image.
    pub const UNCHANGED: &str = "unchanged";
    /// fetched: the bytes the download took (a delta's size when the image was rebuilt from
    /// one, else the image's).
    pub const BYTES: &str = "bytes";
    /// fetched: the version whose image a delta rebuilt this one from, or absent.
    pub const DELTA_FROM: &str = "delta_from";
}

/// `POST /v1/upgrade` (streamed as install is: progress, fetched, switched, rollback events,
/// then done) and `POST /v1/rollback`.
pub mod upgrade {
    pub use super::common::NAME;
    pub use super::install::EVENT;
    /// The version a package leaves.
    pub const FROM: &str = "from";
    /// The version a package moves to.
    pub const TO: &str = "to";
    /// rollback event, rolled_back: why the new version did not prove itself.
    pub const REASON: &str = "reason";
    /// The result: the packages upgraded and confirmed (name, from, to).
    pub const UPGRADED: &str = "upgraded";
    /// The result: the packages whose upgrade was rolled back (name, from, to, reason).
    pub const ROLLED_BACK: &str = "rolled_back";
    /// The result (and an event), `berth upgrade` of all: the packages left as they are
    /// because they hold an update lock (name, until).
    pub const HELD: &str = "held";
    /// Until when a package holds its update lock (seconds since the epoch).
    pub const UNTIL: &str = "until";
}

/// `POST /v1/remove`.
pub mod remove {
    /// The packages removed.
    pub const REMOVED: &str = "removed";
    /// Whether their /data was deleted too.
    pub const PURGED: &str = "purged";
    /// A purge of packages no longer installed: those whose left-over /data was deleted.
    pub const DATA_PURGED: &str = "data_purged";
}

/// `POST /v1/gc`.
pub mod gc {
    /// The sha256 of each deleted image.
    pub const REMOVED: &str = "removed";
    /// The bytes freed.
    pub const FREED_BYTES: &str = "freed_bytes";
}

/// `POST /v1/start` and `POST /v1/restart`.
pub mod start {
    pub use super::common::{INIT_PID, NAME};
    /// Milliseconds from spawning the shim to its report.
    pub const START_MS: &str = "start_ms";
    /// With `trace` asked: `[[step, ns], …]`, when each step of the start began, in
    /// CLOCK_REALTIME nanoseconds (docs/benchmarks/README.md, "The start path").
    pub const TRACE: &str = "trace";
}

/// `POST /v1/stop`.
pub mod stop {
    pub use super::common::NAME;
    /// False if it had to be killed after the timeout.
    pub const GRACEFUL: &str = "graceful";
    /// Milliseconds the stop took.
    pub const STOP_MS: &str = "stop_ms";
    /// Its exit record ([`exit`](super::exit)), or null.
    pub const EXIT: &str = "exit";
}

/// `POST /v1/limit`.
pub mod limit {
    pub use super::common::NAME;
    /// Whether the container is running.
    pub const RUNNING: &str = "running";
    /// Whether the running container's cgroup files were written.
    pub const APPLIED: &str = "applied";
    /// What `berth limit` has set ([`limits`](super::limits)).
    pub const OVERRIDES: &str = "overrides";
    /// The limits in force ([`limits`](super::limits)).
    pub const LIMITS: &str = "limits";
}

/// A container's limits (and its overrides) in `POST /v1/limit`; null is unlimited.
pub mod limits {
    pub use super::common::{CPU_MAX_PERCENT, MEMORY_MAX, PIDS_MAX};
    /// The CPU weight.
    pub const CPU_WEIGHT: &str = "cpu_weight";
    /// The memory soft limit, in bytes.
    pub const MEMORY_SOFT: &str = "memory_soft";
    /// The CPUs it may run on.
    pub const CPUSET: &str = "cpuset";
    /// The bandwidth cap from the container, bits per second.
    pub const EGRESS: &str = "egress";
    /// The bandwidth cap to the container, bits per second.
    pub const INGRESS: &str = "ingress";
}

/// `GET /v1/stats`: the group's and each running container's cgroup counters.
pub mod stats {
    pub use super::common::{CONTAINERS, CPUS, CPU_MAX_PERCENT, MEMORY_MAX, NAME, PIDS_MAX};
    /// The cgroup version, v1 or v2.
    pub const CGROUP_VERSION: &str = "cgroup_version";
    /// How long the CPU usage was sampled, in milliseconds.
    pub const SAMPLE_MS: &str = "sample_ms";
    /// The parent cgroup all containers live in.
    pub const GROUP: &str = "group";
    /// The group's cgroup path.
    pub const CGROUP: &str = "cgroup";
    /// CPU usage over the sample, in percent of one CPU.
    pub const CPU_PERCENT: &str = "cpu_percent";
    /// CPU time used in total, in microseconds.
    pub const CPU_USAGE_USEC: &str = "cpu_usage_usec";
    /// Scheduler periods elapsed.
    pub const NR_PERIODS: &str = "nr_periods";
    /// Periods in which the quota throttled it.
    pub const NR_THROTTLED: &str = "nr_throttled";
    /// Time throttled in total, in microseconds.
    pub const THROTTLED_USEC: &str = "throttled_usec";
    /// Memory in use, in bytes.
    pub const MEMORY_CURRENT: &str = "memory_current";
    /// The most memory it used, in bytes.
    pub const MEMORY_PEAK: &str = "memory_peak";
    /// Processes the OOM killer killed in it.
    pub const OOM_KILLS: &str = "oom_kills";
    /// Processes in it.
    pub const PIDS_CURRENT: &str = "pids_current";
    /// The slab reserve (`[slab]`, builds with the `slab` feature): [`super::slab`].
    pub const SLAB: &str = "slab";
    /// What the daemon itself has written since it started: [`super::writes`].
    pub const WRITES: &str = "writes";
}

/// `GET /v1/stats`' `writes`: the daemon's own writes since it started (flash wear).
pub mod writes {
    /// Bytes that reached the block layer (/proc/self/io `write_bytes`); null without the
    /// kernel's task I/O accounting.
    pub const BYTES: &str = "bytes";
    /// Write system calls (`syscw`); null as `bytes`.
    pub const SYSCALLS: &str = "syscalls";
    /// fsyncs the daemon asked for.
    pub const FSYNCS: &str = "fsyncs";
    /// Seconds since the daemon started.
    pub const SECONDS: &str = "seconds";
    /// `bytes` per hour of the daemon's life so far; null as `bytes`, and in its first minute.
    pub const BYTES_PER_HOUR: &str = "bytes_per_hour";
}

/// `GET /v1/stats`' `slab`: the reserve module and each configured cache.
pub mod slab {
    pub use super::common::NAME;
    /// The berth_slab module is loaded.
    pub const LOADED: &str = "loaded";
    /// Why the reserve is not in place (the module could not be loaded or configured); null
    /// when it is.
    pub const ERROR: &str = "error";
    pub const CACHES: &str = "caches";
    /// Objects in use, from /proc/slabinfo (null: the kernel has no such cache).
    pub const ACTIVE_OBJS: &str = "active_objs";
    /// Objects on the cache's slabs.
    pub const TOTAL_OBJS: &str = "total_objs";
    /// Objects handed out without a new page: total - active.
    pub const FREE_OBJS: &str = "free_objs";
    /// Bytes per object.
    pub const OBJECT_SIZE: &str = "object_size";
    /// The reserve, in objects.
    pub const RESERVE: &str = "reserve";
    /// Free objects the module left on the slabs it keeps, when it filled the reserve
    /// (anyone's since: `free_objs` is what is free now).
    pub const HELD: &str = "held";
    /// The pages of the slabs it keeps.
    pub const PAGES: &str = "pages";
    /// `held` is at least `reserve`: the reserve was made.
    pub const HOLDS: &str = "holds";
}

/// `GET /v1/reports` (and each report's summary, `GET /v1/reports/show`): crash archives.
pub mod report {
    pub use super::common::{NAME, SIZE, VERSION};
    /// The reports, oldest first.
    pub const REPORTS: &str = "reports";
    /// A report's id, `<YYYYMMDDTHHMMSSZ>-<container>-<reason>`.
    pub const ID: &str = "id";
    /// exit, signal, start, crashloop, health, guard or panic.
    pub const REASON: &str = "reason";
    /// When it was made, in seconds since the epoch.
    pub const AT: &str = "at";
    /// The archive's format: tar.gz, or tar where the device has no gzip.
    pub const FORMAT: &str = "format";
    /// What happened, in words (`exit 1`, `signal 11 (core dumped)`, a panic's message).
    pub const DETAIL: &str = "detail";
    /// The container's exit record ([`exit`](super::exit)), or null.
    pub const EXIT: &str = "exit";
    /// The berth that wrote it.
    pub const BERTH_VERSION: &str = "berth_version";
    /// The kernel's release.
    pub const KERNEL: &str = "kernel";
    /// The core file in the archive (size, truncated, pid, signal), or null.
    pub const CORE: &str = "core";
    /// The core's size in the archive, in bytes.
    pub const BYTES: &str = "bytes";
    /// Whether the core was cut at `max_core_size`.
    pub const TRUNCATED: &str = "truncated";
    /// What could not be collected, and why.
    pub const NOTES: &str = "notes";
    /// show: the summary kept beside the archive.
    pub const SUMMARY: &str = "summary";
    /// The archive's members (path and size).
    pub const MEMBERS: &str = "members";
    /// A member's path in the archive.
    pub const PATH: &str = "path";
    /// remove: the ids removed.
    pub const REMOVED: &str = "removed";
}

/// `GET /v1/containers/{name}/schedules` (and `POST`'s answer: one schedule; the container
/// API's `/v1/schedules`): a container's cron jobs, each with these fields.
pub mod schedule {
    /// The schedules, the manifest's first.
    pub const SCHEDULES: &str = "schedules";
    /// A schedule's id: `m…` from the manifest, `a1`, `a2`… added through the API.
    pub const ID: &str = "id";
    /// The cron expression, as written.
    pub const CRON: &str = "cron";
    /// The command run in the container (argv, an absolute path first).
    pub const CMD: &str = "cmd";
    /// `manifest` (read-only) or `api`.
    pub const ORIGIN: &str = "origin";
    /// When it was installed or added, in seconds since the epoch.
    pub const CREATED: &str = "created";
    /// When it runs next, in seconds since the epoch, or null (`@reboot`: at the next boot).
    pub const NEXT_RUN: &str = "next_run";
    /// How its last run went ([`last_run`](super::last_run)), or null.
    pub const LAST_RUN: &str = "last_run";
    /// `@reboot`: the boot (`/proc/sys/kernel/random/boot_id`) it last ran in, or was added in.
    pub const BOOT_ID: &str = "boot_id";
}

/// A schedule's last run.
pub mod last_run {
    pub use super::exit::{CODE, SIGNAL};
    /// When it started (or was skipped), in seconds since the epoch.
    pub const TIME: &str = "time";
    /// How long it took, in milliseconds.
    pub const DURATION_MS: &str = "duration_ms";
    /// It made up for due times that passed while the device was off or the daemon down.
    pub const CATCH_UP: &str = "catch_up";
    /// The container was stopped and this run started it.
    pub const STARTED: &str = "started";
    /// It outlived its time (until its next due time) and was killed.
    pub const TIMED_OUT: &str = "timed_out";
    /// Why it did not run (safe mode, a failed container, a start that failed, too many
    /// jobs running), or absent.
    pub const SKIPPED: &str = "skipped";
    /// The last bytes of its output (stdout and stderr; all of it went to the container's log).
    pub const OUTPUT: &str = "output";
}

/// `GET /v1/inspect`: the protections a container runs with.
pub mod inspect {
    pub use super::common::NAME;
    /// Whether the package is trusted.
    pub const TRUSTED: &str = "trusted";
    /// Whether it runs without a user namespace.
    pub const PRIVILEGED: &str = "privileged";
    /// Its user-namespace id map ([`idmap`]), or null.
    pub const IDMAP: &str = "idmap";
    /// The capabilities it keeps.
    pub const CAPABILITIES: &str = "capabilities";
    /// Its seccomp profile ([`seccomp`]).
    pub const SECCOMP: &str = "seccomp";
    /// The device nodes it has.
    pub const DEVICES: &str = "devices";
    /// The device controller in use.
    pub const DEVICES_CGROUP: &str = "devices_cgroup";
    /// Whether no_new_privs is set.
    pub const NO_NEW_PRIVS: &str = "no_new_privs";
    /// Its AppArmor profile, or null.
    pub const APPARMOR: &str = "apparmor";

    /// The id map of `inspect`.
    pub mod idmap {
        /// The first id inside the container.
        pub const CONTAINER: &str = "container";
        /// The host id it maps to.
        pub const HOST: &str = "host";
        /// How many ids.
        pub const COUNT: &str = "count";
    }

    /// The seccomp profile of `inspect`.
    pub mod seccomp {
        /// The profile's name and version.
        pub const PROFILE: &str = "profile";
        /// The syscalls granted back to the package.
        pub const GRANTED: &str = "granted";
        /// The syscalls denied.
        pub const DENIED: &str = "denied";
    }
}

/// `GET /v1/net`: the bridge, then each package's network.
pub mod net {
    pub use super::common::{CONTAINERS, NAME};
    /// The bridge's name.
    pub const BRIDGE: &str = "bridge";
    /// The bridge's address.
    pub const GATEWAY: &str = "gateway";
    /// The isolated subnet.
    pub const SUBNET: &str = "subnet";
    /// berth's nftables table.
    pub const TABLE: &str = "table";
    /// The pid of berth's dnsmasq, or null.
    pub const DHCP_SERVER: &str = "dhcp_server";
    /// nft failures reading the counters.
    pub const ERRORS: &str = "errors";
    /// A package's network mode.
    pub const MODE: &str = "mode";
    /// Its published ports, `host:container/proto`.
    pub const PUBLISH: &str = "publish";
    /// Its address with the prefix length.
    pub const IPV4: &str = "ipv4";
    /// Its MAC address.
    pub const MAC: &str = "mac";
    /// Its host-side veth.
    pub const VETH: &str = "veth";
    /// Whether it asked for DHCP.
    pub const DHCP: &str = "dhcp";
    /// Packets dropped for a source not its own.
    pub const DROPPED_SPOOFED: &str = "dropped_spoofed";
    /// Packets dropped by the rules it was not granted.
    pub const DROPPED_DENIED: &str = "dropped_denied";
    /// Its data cap and what it moved over the WAN in the period (null: no cap).
    pub const DATA: &str = "data";
}

/// `GET /v1/net/hosts`: the LAN's hosts.
pub mod hosts {
    /// The hosts.
    pub const HOSTS: &str = "hosts";
    /// A host's address.
    pub const IP: &str = "ip";
    /// Its MAC address.
    pub const MAC: &str = "mac";
    /// The interface it is seen on.
    pub const DEV: &str = "dev";
    /// Its name from a DHCP lease or an mDNS answer, or null.
    pub const HOSTNAME: &str = "hostname";
    /// Where the name came from: dhcp, mdns, or null.
    pub const HOSTNAME_SOURCE: &str = "hostname_source";
    /// Its neighbour state: reachable, stale, delay, probe, permanent; null when the
    /// kernel's table was read from /proc/net/arp.
    pub const STATE: &str = "state";
    /// When the kernel last heard of it, in seconds since the epoch, or null.
    pub const LAST_SEEN: &str = "last_seen";
    /// Seconds since then, or null.
    pub const AGE_S: &str = "age_s";
}

/// `GET /v1/governor`: the adaptive CPU governor, and its history's entries.
pub mod governor {
    pub use super::common::CPUS;
    /// static, learning, active or fallback.
    pub const MODE: &str = "mode";
    /// Why the mode is what it is, or null.
    pub const NOTE: &str = "note";
    /// The probe, described, or null.
    pub const PROBE: &str = "probe";
    /// Milliseconds between probes.
    pub const INTERVAL_MS: &str = "interval_ms";
    /// A probe's timeout, in milliseconds.
    pub const TIMEOUT_MS: &str = "timeout_ms";
    /// T_l, percent of all CPUs.
    pub const T_LOWER: &str = "t_lower";
    /// T_u, percent of all CPUs.
    pub const T_UPPER: &str = "t_upper";
    /// R_n, the normal response rate, or null.
    pub const R_N: &str = "r_n";
    /// Whether R_n is configured or learned.
    pub const R_N_SOURCE: &str = "r_n_source";
    /// R_c, the current response rate, or null.
    pub const R_C: &str = "r_c";
    /// The last probe's latency, or null after a failed one.
    pub const LAST_LATENCY_MS: &str = "last_latency_ms";
    /// The group's cap, percent of all CPUs.
    pub const CAP: &str = "cap";
    /// The formula's share before smoothing and damping.
    pub const TARGET: &str = "target";
    /// Consecutive failed probes.
    pub const FAILURES: &str = "failures";
    /// Probes made.
    pub const PROBES: &str = "probes";
    /// The last failed write of the cap, or null.
    pub const LAST_ERROR: &str = "last_error";
    /// The last changes of the cap or the mode, oldest first.
    pub const HISTORY: &str = "history";
    /// A history entry's time, in seconds since the epoch.
    pub const AT: &str = "at";
}

/// The operations an OpenAPI file of ours lists, as (METHOD, path template): the paths at
/// two spaces, their methods at four. For the tests that hold the routers to the files.
pub fn documented_operations(spec: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut path = None;
    for l in spec.lines() {
        if let Some(p) = l.strip_prefix("  /").and_then(|p| p.strip_suffix(':')) {
            path = Some(format!("/{p}"));
        } else if let (Some(p), Some(m)) = (&path, l.strip_prefix("    ")) {
            let m = m.trim_end_matches(':');
            if ["get", "post", "delete", "put"].contains(&m) {
                out.push((m.to_ascii_uppercase(), p.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_read_back() {
        let mut seen = std::collections::BTreeSet::new();
        for k in ErrorKind::ALL {
            assert!(seen.insert(k.code()), "{} twice", k.code());
            assert_eq!(ErrorKind::from_code(k.code()), Some(*k));
            assert!((400..600).contains(&k.status()), "{k:?}");
            assert!(
                k.code()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                k.code()
            );
        }
        assert_eq!(ErrorKind::from_code("nonsense"), None);
        assert_eq!(ErrorKind::NotInstalled.status(), 404);
        assert_eq!(ErrorKind::NoSpace.code(), "no_space");
    }

    #[test]
    fn the_openapi_file_lists_every_code() {
        let spec = include_str!("../../../docs/openapi.yaml");
        for k in ErrorKind::ALL {
            let row = format!("| {} | {} |", k.code(), k.status());
            let item = format!("            - {}\n", k.code());
            assert!(spec.contains(&row), "docs/openapi.yaml: no row {row}");
            assert!(
                spec.contains(&item),
                "docs/openapi.yaml: {} not in the enum",
                k.code()
            );
        }
    }

    #[test]
    fn the_openapi_file_has_every_field() {
        // Both APIs' files: the admin socket's and the containers'.
        let spec = concat!(
            include_str!("../../../docs/openapi.yaml"),
            include_str!("../../../docs/container-api.yaml")
        );
        let properties: std::collections::BTreeSet<&str> = spec
            .lines()
            .filter_map(|l| l.trim_start().split_once(':').map(|(k, _)| k))
            .collect();
        let (mut n, mut missing) = (0, Vec::new());
        for l in include_str!("api.rs").lines() {
            let Some((ident, rest)) = l
                .trim()
                .strip_prefix("pub const ")
                .and_then(|c| c.split_once(": &str = \""))
            else {
                continue;
            };
            let field = rest.trim_end_matches("\";");
            assert_eq!(
                ident.to_ascii_lowercase(),
                field,
                "{ident} names another field"
            );
            if !properties.contains(field) {
                missing.push(field);
            }
            n += 1;
        }
        assert!(n > 100, "only {n} fields read from api.rs");
        assert!(
            missing.is_empty(),
            "docs/openapi.yaml, docs/container-api.yaml: no property {missing:?}"
        );
    }
}
