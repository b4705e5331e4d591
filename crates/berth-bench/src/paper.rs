//! `berth-bench paper`: one report whose sections mirror the published evaluations berth
//! must answer (the shared reference's parts A–E, and crun's start-time claim): for each
//! published table, the published figures with their source beside berth's counterpart
//! measured in this run, as a ratio with its 95 % confidence interval and a verdict, and a
//! line on how this measurement differs (hardware, tools, emulation).
//!
//! Every ratio is a performance ratio, container over host ("guest / host"): above 1 the
//! container did better. Published rates are divided as published; published times are
//! turned round (host / guest), so that both read the same way. What is "within noise" is
//! decided on this run's interval only: the published figures carry no intervals.

use std::fmt::Write;

use serde_json::Value;

use crate::chart::{Bar, Group, Panel};
use crate::stats::summarize;

/// How berth's counterpart of a published row is found in a run's JSON.
#[derive(Debug, Clone, Copy)]
pub enum Ours {
    /// A host-vs-guest metric of a suite (`metrics`), the first whose test starts so.
    Metric(&'static str, &'static str),
    /// The net suite's series (title prefix, network mode, bars) over the mode "host";
    /// `true` when higher is better.
    Net(&'static str, &'static str, &'static str, bool),
    /// An LXCBENCH matrix row (suite, test) in one column over "host_alone".
    Matrix(&'static str, &'static str, &'static str),
    /// A cgroups field, v1 over v2, at a rate.
    Cgroups(&'static str, &'static str),
    /// berth's start to the first instruction over a peer's (activation).
    Start(&'static str),
    /// Nothing of the same kind is measured; why.
    None(&'static str),
}

/// One published row and berth's counterpart.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub test: &'static str,
    /// As published (figures, or the finding in words).
    pub published: &'static str,
    /// The published performance ratio, where it is one number.
    pub ratio: Option<f64>,
    pub ours: Ours,
    /// What berth ran for it.
    pub counterpart: &'static str,
}

/// One published table.
pub struct Published {
    pub id: &'static str,
    pub title: &'static str,
    pub source: &'static str,
    /// What the ratio compares, for the table's header.
    pub ratio_is: &'static str,
    pub rows: &'static [Row],
    /// How this run's measurement differs, before the machine's own facts.
    pub differs: &'static str,
    /// The environment's keys of the tools that measured it (their versions follow).
    pub tools: &'static [&'static str],
}

const fn r(
    test: &'static str,
    published: &'static str,
    ratio: Option<f64>,
    ours: Ours,
    counterpart: &'static str,
) -> Row {
    Row {
        test,
        published,
        ratio,
        ours,
        counterpart,
    }
}

const A_SRC: &str = "Menshchikov, \"Design and testing of LXC-based virtualization system for resource-constrained MIPS devices\": 600 MHz dual-core MIPS router, 256 MB";
const B_SRC: &str = "\"Performance evaluation of LXC on embedded microprocessors\": LXC 2.1.1 on OpenWrt/LEDE 17.01, MIPS 24KEc 580 MHz, MIPS 74Kc 720 MHz, ARMv5 1.2 GHz, Raspberry Pi 3B";
const C_SRC: &str = "GENIVI LXCBENCH: Pandaboard OMAP4, 2 × Cortex-A9 1 GHz, Phoronix Test Suite";
const E_SRC: &str = "cgroup v1 vs v2 under LXC 4.0: DPDK L2 forwarding, real-time kernel 5.10, 64-byte packets at 1.52 and 6.24 Mpkt/s";

/// The published tables with a counterpart in berth-bench's suites (parts A, B, C, E and
/// the start time; part D, the microVM study, has a table of its own: [`microvm_section`]).
pub const TABLES: &[Published] = &[
    Published {
        id: "A.1",
        title: "nbench (BYTEmark), index per test",
        source: A_SRC,
        ratio_is: "guest / host index",
        rows: &[
            r("Numeric Sort", "157.8933 → 157.9457 (−0.0333 %)", Some(1.000333), Ours::Metric("cpu", "sysbench cpu, 1 instance"), "sysbench cpu, 1 instance (integer: primes)"),
            r("String Sort", "6.1465 → 6.1243 (+0.3618 %)", Some(0.996382), Ours::None("no string-sorting test"), "–"),
            r("Bitfield", "50020270 → 50159090 (−0.2775 %)", Some(1.002775), Ours::Metric("cpu", "stress-ng cpu bitops"), "stress-ng cpu bitops"),
            r("FP Emulation", "39.7115 → 39.7496 (−0.096 %)", Some(1.00096), Ours::Metric("cpu", "stress-ng cpu double"), "stress-ng cpu double"),
            r("Fourier", "51.0747 → 51.1460 (−0.1395 %)", Some(1.001395), Ours::Metric("cpu", "stress-ng cpu fft"), "stress-ng cpu fft"),
            r("Assignment", "2.8199 → 2.8622 (−1.5 %)", Some(1.015), Ours::None("no assignment-problem test"), "–"),
            r("IDEA", "755.0928 → 753.0582 (+0.2695 %)", Some(0.997305), Ours::None("no cipher test"), "–"),
            r("Huffman", "171.1702 → 171.0864 (+0.049 %)", Some(0.99951), Ours::None("no compression test"), "–"),
            r("Neural Net", "0.0635 → 0.0636 (−0.1495 %)", Some(1.001495), Ours::None("no neural-net test"), "–"),
            r("LU Decomp.", "2.0483 → 2.0388 (+0.4616 %)", Some(0.995384), Ours::Metric("cpu", "stress-ng cpu matrixprod"), "stress-ng cpu matrixprod"),
        ],
        differs: "nbench is not in Debian: stress-ng's CPU methods and sysbench stand in for the tests of the same kind (bit fields, floating point, FFT, matrices, integers); the published runs rebooted between 100 runs",
        tools: &["sysbench", "stress-ng"],
    },
    Published {
        id: "A.2",
        title: "nbench, N processes in parallel, seconds to complete",
        source: A_SRC,
        ratio_is: "host / guest time",
        rows: &[
            r("1 process", "333.59 s → 335.800 s", Some(0.99342), Ours::Metric("cpu", "sysbench cpu, 1 instance"), "sysbench cpu, 1 instance"),
            r("2 processes", "669.86 s → 668.345 s", Some(1.00227), Ours::Metric("cpu", "sysbench cpu, 2 instances"), "sysbench cpu, 2 instances"),
            r("4 processes", "1338.323 s → 1337.288 s", Some(1.00077), Ours::Metric("cpu", "sysbench cpu, 4 instances"), "sysbench cpu, 4 instances"),
            r("8 processes", "2676.929 s → 2681.940 s", Some(0.99813), Ours::Metric("cpu", "sysbench cpu, 8 instances"), "sysbench cpu, 8 instances"),
        ],
        differs: "sysbench cpu (primes) instead of nbench; a 2-core machine against the published single-core board",
        tools: &["sysbench"],
    },
    Published {
        id: "A.3",
        title: "iperf v2, 30 s, server on a separate board",
        source: A_SRC,
        ratio_is: "guest / host Mbit/s",
        rows: &[
            r("TCP, shared network", "93.26 → 85.14 Mbit/s", Some(0.913), Ours::Net("Throughput", "shared", "iperf3 TCP", true), "iperf3 TCP, shared container"),
            r("TCP, isolated (veth + bridge)", "86.75 → 79.64 Mbit/s", Some(0.918), Ours::Net("Throughput", "isolated", "iperf3 TCP", true), "iperf3 TCP, isolated container (published port)"),
            r("UDP 100 Mbit/s, shared", "94.92 → 95.22 Mbit/s", Some(1.003), Ours::Net("Throughput", "shared", "iperf3 UDP", true), "iperf3 UDP 100 Mbit/s received, shared"),
            r("UDP 100 Mbit/s, isolated", "93.60 → 94.17 Mbit/s", Some(1.006), Ours::Net("Throughput", "isolated", "iperf3 UDP", true), "iperf3 UDP 100 Mbit/s received, isolated"),
        ],
        differs: "iperf3 between two network namespaces of this machine (a veth pair) instead of two boards on a 100 Mbit/s link: the link does not cap the rate, so the container's cost shows as it is",
        tools: &[],
    },
    Published {
        id: "A.4",
        title: "busybox dd, 4096 × 10000, overlayfs on squashfs + ubifs",
        source: A_SRC,
        ratio_is: "guest / host MB/s",
        rows: &[
            r("write, no sync", "18.504 → 18.634 MB/s", Some(1.00703), Ours::Metric("fs", "dd write, no sync"), "busybox dd write, no sync"),
            r("write, sync", "0.897 → 0.919 MB/s", Some(1.02453), Ours::Metric("fs", "dd write, conv=fsync"), "busybox dd write, conv=fsync"),
            r("read, caches dropped", "7.241 → 7.207 MB/s", Some(0.9953), Ours::Metric("fs", "dd read, caches dropped"), "busybox dd read, caches dropped"),
        ],
        differs: "berth's /data is a directory of the host's file system (here ext4 on a virtual disk), not overlayfs on squashfs and ubifs on flash",
        tools: &["fio"],
    },
    Published {
        id: "B.1",
        title: "sysbench cpu (primes to 10000), 1–16 instances; Linpack N = 1000",
        source: B_SRC,
        ratio_is: "host / guest time (Linpack: guest / host MFLOPS)",
        rows: &[
            r("sysbench, 1 instance", "LXC overhead ≤ 4 % worst case", None, Ours::Metric("cpu", "sysbench cpu, 1 instance"), "sysbench cpu, 1 instance"),
            r("sysbench, 8 instances", "LXC overhead ≤ 4 % worst case", None, Ours::Metric("cpu", "sysbench cpu, 8 instances"), "sysbench cpu, 8 instances"),
            r("Linpack N = 1000", "no relevant overhead, up to 16 instances", None, Ours::Metric("cpu", "Linpack"), "hpcc HPL, N = 1000"),
        ],
        differs: "x86_64 instead of MIPS and ARM routers; Linpack from hpcc's HPL",
        tools: &["sysbench", "hpcc"],
    },
    Published {
        id: "B.2",
        title: "nuttcp TCP and netperf request-response",
        source: B_SRC,
        ratio_is: "guest / host (rates), host / guest (round trips)",
        rows: &[
            r("nuttcp TCP, macvlan", "≈ native", None, Ours::Net("Throughput", "macvlan", "nuttcp TCP", true), "nuttcp TCP, macvlan container"),
            r("nuttcp TCP, veth (bridge)", "lower on archc7 and l4500 (TX overhead on ARM)", None, Ours::Net("Throughput", "isolated", "nuttcp TCP", true), "nuttcp TCP, isolated container"),
            r("TCP_RR, veth", "no significant RTT increase", None, Ours::Net("Request-response", "isolated", "sockperf TCP", false), "sockperf ping-pong TCP, isolated"),
            r("UDP_RR, veth", "no significant RTT increase", None, Ours::Net("Request-response", "isolated", "sockperf UDP", false), "sockperf ping-pong UDP, isolated"),
            r("UDP_RR, macvlan", "no significant RTT increase", None, Ours::Net("Request-response", "macvlan", "sockperf UDP", false), "sockperf ping-pong UDP, macvlan"),
        ],
        differs: "netperf is in Debian's non-free section: sockperf ping-pong (100-byte messages) for its RR tests; namespaces of one machine instead of boards on a 100 Mbit/s link",
        tools: &[],
    },
    Published {
        id: "B.3",
        title: "STREAM, % change in the container (4 boards)",
        source: B_SRC,
        ratio_is: "guest / host MB/s",
        rows: &[
            r("Copy", "−0.2 … −4.5 % (0.955–0.998)", None, Ours::Metric("mem", "STREAM Copy"), "STREAM Copy (hpcc)"),
            r("Scale", "−0.1 … −2.2 % (0.978–0.999)", None, Ours::Metric("mem", "STREAM Scale"), "STREAM Scale (hpcc)"),
            r("Add", "−0.1 … −0.8 % (0.992–0.999)", None, Ours::Metric("mem", "STREAM Add"), "STREAM Add (hpcc)"),
            r("Triad", "−0.1 … −1 % (0.990–0.999)", None, Ours::Metric("mem", "STREAM Triad"), "STREAM Triad (hpcc)"),
            r("STREAM2 Copy", "−0.1 … −3 %", None, Ours::Metric("mem", "mbw memcpy,"), "mbw memcpy (nearest)"),
        ],
        differs: "STREAM from hpcc; STREAM2 is not in Debian (mbw's memcpy is the nearest to its Copy)",
        tools: &["hpcc", "mbw"],
    },
    Published {
        id: "C",
        title: "LXCBENCH: host and guest at once, relative to each alone",
        source: C_SRC,
        ratio_is: "with the other running / alone",
        rows: &[
            r("Stream Copy, host with guest", "0.99", Some(0.99), Ours::Matrix("mem", "STREAM Copy", "host_with_guest"), "STREAM Copy, host beside the container"),
            r("Stream Copy, guest with host", "0.95", Some(0.95), Ours::Matrix("mem", "STREAM Copy", "guest_with_host"), "STREAM Copy, container beside the host"),
            r("Stream Scale, guest with host", "0.84", Some(0.84), Ours::Matrix("mem", "STREAM Scale", "guest_with_host"), "STREAM Scale, container beside the host"),
            r("Stream Triad, guest with host", "0.77", Some(0.77), Ours::Matrix("mem", "STREAM Triad", "guest_with_host"), "STREAM Triad, container beside the host"),
            r("Stream Add, guest with host", "0.83", Some(0.83), Ours::Matrix("mem", "STREAM Add", "guest_with_host"), "STREAM Add, container beside the host"),
            r("LAME MP3, guest with host", "1.00", Some(1.0), Ours::Matrix("cpu", "sysbench cpu, 1 instance", "guest_with_host"), "sysbench cpu, container beside the host (time, turned round)"),
        ],
        differs: "2 shared x86_64 cores; the containers' group uncapped so each side can have a core; sysbench stands in for LAME (a CPU-bound encoder)",
        tools: &["hpcc", "sysbench"],
    },
    Published {
        id: "E",
        title: "cgroup v1 vs v2",
        source: E_SRC,
        ratio_is: "v1 / v2 (latency, counts: above 1, v1 is worse)",
        rows: &[
            r("p50 round trip", "same in v1 and v2", Some(1.0), Ours::Cgroups("p50_us", "max"), "sockperf ping-pong, 64 B UDP, as fast as possible"),
            r("p99", "same", Some(1.0), Ours::Cgroups("p99_us", "max"), "the same runs"),
            r("p99.9", "v1 worse", None, Ours::Cgroups("p999_us", "max"), "the same runs"),
            r("maximum", "v1 worse", None, Ours::Cgroups("max_us", "max"), "the same runs"),
            r("instructions", "674 × 10⁹ vs 659 × 10⁹ (v1 +2.4 %)", Some(1.0228), Ours::Cgroups("instructions", "max"), "perf stat -a, the same runs"),
            r("CPU migrations", "297 vs 148 (2×)", Some(2.007), Ours::Cgroups("cpu_migrations", "max"), "perf stat -a, the same runs"),
            r("p99.9 at a fixed rate", "v1 worse", None, Ours::Cgroups("p999_us", "1000"), "sockperf ping-pong at 1000 messages/s"),
            r("maximum at a fixed rate", "v1 worse", None, Ours::Cgroups("max_us", "1000"), "the same runs at 1000 messages/s"),
        ],
        differs: "a CPU-capped berth container's UDP echo across berth's bridge instead of DPDK L2 forwarding on a real-time kernel; the same Debian 6.1 kernel booted with each cgroup version in a VM",
        tools: &[],
    },
    Published {
        id: "F",
        title: "Start time: crun's claim",
        source: "crun (its README): starting a container takes about half of runc's time",
        ratio_is: "berth / peer, start request → payload's first instruction (below 1: berth is faster)",
        rows: &[
            r("crun / runc", "≈ 0.5", Some(0.5), Ours::Start("runc"), "berth / runc run -d"),
            r("berth / lxc-execute", "(target ≤ 0.8)", Some(0.8), Ours::Start("lxc-execute"), "berth / bare lxc-execute"),
        ],
        differs: "the same squashfs image and mounts for all three peers; berth's own configuration adds a user namespace, seccomp and /proc masks that the bare lxc-execute and runc peers do not have",
        tools: &["runc", "lxc_tools", "activation_payload"],
    },
];

/// A ratio's samples for a row, from the run's JSON (None with why when not measured).
pub fn samples(doc: &Value, ours: Ours) -> Result<Vec<f64>, String> {
    let suites = &doc["suites"];
    let suite_of = |s: &str| -> Result<&Value, String> {
        let v = &suites[s];
        if v.is_null() {
            return Err(format!("suite {s} not in this run"));
        }
        if let Some(why) = v["skipped"].as_str().or(v["error"].as_str()) {
            return Err(format!("{s}: {why}"));
        }
        Ok(v)
    };
    let pos = |v: &Value| -> Vec<f64> {
        v.as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let per_round = |a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter()
            .zip(b)
            .map(|(x, y)| x / y)
            .filter(|r| r.is_finite())
            .collect()
    };
    match ours {
        Ours::None(why) => Err(why.into()),
        Ours::Metric(s, test) => {
            let m = suite_of(s)?["metrics"]
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find(|m| m["test"].as_str().is_some_and(|t| t.starts_with(test)))
                })
                .ok_or(format!("no {test} in {s}"))?;
            if let Some(why) = m["skipped"].as_str() {
                return Err(why.into());
            }
            let r = pos(&m["ratio_guest_host"]);
            Ok(if m["higher_is_better"] == false {
                r.iter().map(|x| 1.0 / x).collect()
            } else {
                r
            })
        }
        Ours::Net(title, mode, series, higher) => {
            let panel = suite_of("net")?["series"]
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find(|p| p["title"].as_str().is_some_and(|t| t.starts_with(title)))
                })
                .ok_or(format!("no net series {title}"))?;
            let bars = |m: &str| -> Vec<f64> {
                panel["groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|g| g["label"] == m)
                    .flat_map(|g| g["bars"].as_array().cloned().unwrap_or_default())
                    .find(|b| b["series"].as_str().is_some_and(|s| s.starts_with(series)))
                    .map(|b| pos(&b["samples"]))
                    .unwrap_or_default()
            };
            let (g, h) = (bars(mode), bars("host"));
            Ok(if higher {
                per_round(&g, &h)
            } else {
                per_round(&h, &g)
            })
        }
        Ours::Matrix(s, test, col) => {
            let m = suite_of(s)?["matrix"]
                .as_array()
                .and_then(|a| a.iter().find(|m| m["test"] == test))
                .ok_or(format!("no matrix row {test} in {s}"))?;
            let alone = if col.starts_with("guest") {
                "guest_alone"
            } else {
                "host_alone"
            };
            let (with, a) = (pos(&m[col]), pos(&m[alone]));
            Ok(if m["higher_is_better"] == false {
                per_round(&a, &with)
            } else {
                per_round(&with, &a)
            })
        }
        Ours::Cgroups(..) => Err("the two boots' runs are not paired: see estimate()".into()),
        Ours::Start(peer) => {
            let a = suite_of("activation")?;
            let key = if peer == "runc" {
                "runc_first_instruction"
            } else {
                "lxc_execute_first_instruction"
            };
            Ok(per_round(
                &pos(&a["samples_ms"]["berth_first_instruction"]),
                &pos(&a["samples_ms"][key]),
            ))
        }
    }
}

/// A ratio as this run measured it: mean and the half-width of its 95 % CI (NaN: one
/// sample).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Est {
    pub mean: f64,
    pub ci95: f64,
}

/// A row's ratio: the mean of its per-round ratios, or, for cgroup v1 over v2 (two boots'
/// runs, not paired), the ratio of the two sides' means with both sides' spread.
pub fn estimate(doc: &Value, ours: Ours) -> Result<Est, String> {
    if let Ours::Cgroups(field, rate) = ours {
        let cg = &doc["suites"]["cgroups"];
        if cg.is_null() {
            return Err("suite cgroups not in this run".into());
        }
        if let Some(why) = cg["skipped"].as_str().or(cg["error"].as_str()) {
            return Err(format!("cgroups: {why}"));
        }
        let of = |side: &str| -> Vec<f64> {
            cg["rr"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|x| x["cgroup"] == side && x["rate"] == rate)
                .filter_map(|x| x["values"][field].as_f64())
                .collect()
        };
        let (v1, v2) = (of("v1"), of("v2"));
        if v1.is_empty() || v2.is_empty() {
            return Err(format!("{field} not counted here"));
        }
        return crate::suites::cgroups::ratio_of_means(&v1, &v2)
            .map(|(mean, ci95)| Est { mean, ci95 })
            .ok_or_else(|| format!("{field}: v2's mean is 0"));
    }
    let s = samples(doc, ours)?;
    let x = summarize(&s).ok_or("no samples")?;
    Ok(Est {
        mean: x.mean,
        ci95: x.ci95,
    })
}

/// `0.98 ± 0.02`, and whether the interval holds 1 (or, for start times, the target).
pub fn verdict(x: Option<Est>, ours: Ours, published: Option<f64>) -> (String, String) {
    let Some(x) = x else {
        return ("–".into(), "not measured".into());
    };
    let cell = if x.ci95.is_finite() {
        format!("{:.3} ± {:.3}", x.mean, x.ci95)
    } else {
        format!("{:.3} (n = 1)", x.mean)
    };
    let (lo, hi) = if x.ci95.is_finite() {
        (x.mean - x.ci95, x.mean + x.ci95)
    } else {
        (x.mean, x.mean)
    };
    let v = match ours {
        Ours::Start(_) => {
            let target = published.unwrap_or(1.0);
            if hi <= target {
                format!("at or below {target} ✓")
            } else if lo > target {
                format!("above {target} ✗")
            } else {
                format!("{target} within the interval")
            }
        }
        Ours::Cgroups(..) if (lo..=hi).contains(&1.0) => "v1 = v2 within noise".into(),
        Ours::Cgroups(..) if lo > 1.0 => format!("v1 {:.0} % higher", (x.mean - 1.0) * 100.0),
        Ours::Cgroups(..) => format!("v1 {:.0} % lower", (1.0 - x.mean) * 100.0),
        _ if (lo..=hi).contains(&1.0) => "within noise".into(),
        _ if lo > 1.0 => format!("container {:.1} % better", (x.mean - 1.0) * 100.0),
        _ => format!("container {:.1} % worse", (1.0 - x.mean) * 100.0),
    };
    (cell, v)
}

/// The machine's facts for "how ours differs".
fn machine(doc: &Value) -> String {
    let e = &doc["environment"];
    let s = |k: &str| e[k].as_str().unwrap_or("?").to_string();
    format!(
        "this run: {} ({} cores online), {} MiB, kernel {}, {}, liblxc {}",
        s("cpu_model"),
        e["cores"].as_u64().map_or("?".into(), |c| c.to_string()),
        e["mem_total_mib"]
            .as_u64()
            .map_or("?".into(), |c| c.to_string()),
        s("kernel"),
        s("distribution"),
        s("liblxc")
    )
}

/// The microVM study (part D): its findings, then this run's ratios per request size.
fn microvm_section(doc: &Value, out: &mut String) {
    let v = &doc["suites"]["microvm"];
    let _ = writeln!(out, "## D. MicroVMs vs containers on edge devices\n");
    let _ = writeln!(out, "Published: \"MicroVMs vs containers on edge devices\" (Jetson Nano, Raspberry Pi 4; native, runc, QEMU/KVM, Firecracker, Kata): fio sequential read: the gap is insignificant (worst: runc 12 % over Kata at 256 B); random read: microVMs far below containers (4 KB requests); random write: Firecracker 3.3× runc at 2 KB (writes absorbed in memory by the virtual block device); netperf TCP 64 B–4 KB: microVMs comparable or better on the Pi 4 (virtio-net batching), worse on the Nano; microVMs +19 % power.\n");
    if let Some(why) = v["skipped"].as_str().or(v["error"].as_str()) {
        let _ = writeln!(out, "**Not measured in this run: {why}**\n");
        return;
    }
    if v.is_null() {
        let _ = writeln!(
            out,
            "**Not measured in this run: the microvm suite did not run.**\n"
        );
        return;
    }
    let label = v["label"].as_str();
    let _ = writeln!(
        out,
        "| test | size | berth / host | runc / host | microVM / host{} |\n|---|---|---|---|---|",
        label.map(|l| format!(" ({l})")).unwrap_or_default()
    );
    for row in v["fio"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(v["net"].as_array().into_iter().flatten())
    {
        let cell = |k: &str| {
            let s: Vec<f64> = row[k]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            crate::suites::microvm::ratio_cell(&s)
        };
        let b = row["size_bytes"].as_u64().unwrap_or(0);
        let size = if b >= 1024 {
            format!("{} KiB", b / 1024)
        } else {
            format!("{b} B")
        };
        let _ = writeln!(
            out,
            "| {} | {size} | {} | {} | {} |",
            row["test"].as_str().unwrap_or(""),
            cell("ratio_berth_host"),
            cell("ratio_runc_host"),
            cell("ratio_microvm_host")
        );
    }
    let _ = writeln!(
        out,
        "\nHow ours differs: {}; fio with buffered I/O (the study's 256 B requests cannot be direct); netperf replaced by iperf3 (TCP_STREAM) and sockperf (TCP_RR); {}.\n",
        match label {
            Some(l) => format!("the microVM runs under QEMU's TCG here: {l}"),
            None => "the microVM runs under KVM".into(),
        },
        machine(doc)
    );
}

/// The report (Markdown) and its chart's panels.
pub fn render(doc: &Value, svg: Option<&str>) -> (String, Vec<Panel>) {
    let mut out = String::from("# berth-bench: berth beside the published evaluations\n\n");
    let _ = writeln!(
        out,
        "Every ratio is container over host as a performance ratio (above 1: the container did better; times are turned round), this run's mean ± 95 % CI over its rounds; \"within noise\" when the interval holds 1. Published figures are other hardware's: their ratios and shapes compare, not their absolute numbers. {}.\n",
        machine(doc)
    );
    if let Some(s) = svg {
        let _ = writeln!(out, "![ratios beside the published ones]({s})\n");
    }
    let mut panels = Vec::new();
    let mut section = "";
    for t in TABLES {
        let head = t.id.split('.').next().unwrap_or(t.id);
        if head != section {
            section = head;
            if head == "E" {
                microvm_section(doc, &mut out);
            }
            let name = match head {
                "A" => "A. LXC on a 600 MHz MIPS router",
                "B" => "B. LXC on OpenWrt routers",
                "C" => "C. GENIVI LXCBENCH",
                "E" => "E. cgroup v1 vs v2",
                _ => "F. Start time",
            };
            let _ = writeln!(out, "## {name}\n");
        }
        let _ = writeln!(
            out,
            "### {} {}\n\nPublished: {}.\n",
            t.id, t.title, t.source
        );
        let _ = writeln!(
            out,
            "| published test | published | published ratio | berth's counterpart | this run ({}) | verdict |\n|---|---|---|---|---|---|",
            t.ratio_is
        );
        let mut groups = Vec::new();
        for row in t.rows {
            let e = estimate(doc, row.ours);
            let (cell, v) = match &e {
                Ok(e) => verdict(Some(*e), row.ours, row.ratio),
                Err(why) => ("–".into(), why.clone()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {cell} | {v} |",
                row.test,
                row.published,
                row.ratio.map_or("–".into(), |x| format!("{x:.3}")),
                row.counterpart
            );
            let mut bars = Vec::new();
            if let Some(x) = row.ratio {
                bars.push(Bar {
                    series: "published".into(),
                    value: x,
                    lo: f64::NAN,
                    hi: f64::NAN,
                });
            }
            if let Ok(e) = e {
                bars.push(Bar {
                    series: "this run".into(),
                    value: e.mean,
                    lo: e.mean - e.ci95,
                    hi: e.mean + e.ci95,
                });
            }
            if !bars.is_empty() {
                groups.push(Group {
                    label: row.test.into(),
                    bars,
                });
            }
        }
        let tools: Vec<String> = t
            .tools
            .iter()
            .filter_map(|k| doc["environment"][k].as_str().map(|v| format!("{k}: {v}")))
            .collect();
        let _ = writeln!(
            out,
            "\nHow ours differs: {}; {}{}.\n",
            t.differs,
            machine(doc),
            if tools.is_empty() {
                String::new()
            } else {
                format!("; {}", tools.join(", "))
            }
        );
        if !groups.is_empty() {
            panels.push(Panel {
                title: format!("{} {}", t.id, t.title),
                unit: t.ratio_is.into(),
                groups,
            });
        }
    }
    let _ = writeln!(
        out,
        "_Made by `berth-bench paper` from the run of {} ({})._",
        doc["environment"]["date"].as_str().unwrap_or("?"),
        doc["args"]
            .as_array()
            .map(|a| a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "))
            .unwrap_or_default()
    );
    (out, panels)
}

/// Several runs' JSON as one: the suites of later runs replace the same suites of earlier
/// ones; the environment and arguments are the last run's.
pub fn merge(docs: Vec<Value>) -> Value {
    let mut out = serde_json::json!({});
    for d in docs {
        let suites = d["suites"].as_object().cloned().unwrap_or_default();
        for (k, v) in d.as_object().cloned().unwrap_or_default() {
            if k != "suites" {
                out[&k] = v;
            }
        }
        if out["suites"].is_null() {
            out["suites"] = serde_json::json!({});
        }
        for (k, v) in suites {
            out["suites"][&k] = v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "environment": {"cpu_model": "Test CPU", "cores": 2, "mem_total_mib": 1024,
                            "kernel": "6.1", "distribution": "Debian 12", "liblxc": "5.0.2",
                            "date": "2026-11-27T00:00:00Z"},
            "args": ["--quick", "all"],
            "suites": {
                "cpu": {"metrics": [
                    {"test": "sysbench cpu, 1 instance", "higher_is_better": false,
                     "ratio_guest_host": [1.0, 1.02, 0.98]},
                    {"test": "stress-ng cpu bitops (≈ nbench Bitfield)", "higher_is_better": true,
                     "ratio_guest_host": [0.90, 0.91, 0.89]},
                ], "matrix": [{"test": "sysbench cpu, 1 instance", "higher_is_better": false,
                               "host_alone": [1.0, 1.0], "guest_alone": [1.0, 1.0],
                               "host_with_guest": [1.2, 1.2], "guest_with_host": [2.0, 2.0]}]},
                "net": {"series": [{"title": "Throughput by network mode", "unit": "Mbit/s", "groups": [
                    {"label": "host", "bars": [{"series": "iperf3 TCP", "samples": [100.0, 100.0]}]},
                    {"label": "shared", "bars": [{"series": "iperf3 TCP", "samples": [90.0, 92.0]}]},
                ]}]},
                "fs": {"skipped": "fio is missing"},
                "cgroups": {"rr": [
                    {"cgroup": "v1", "rate": "max", "values": {"p999_us": 120.0}},
                    {"cgroup": "v1", "rate": "max", "values": {"p999_us": 120.0}},
                    {"cgroup": "v2", "rate": "max", "values": {"p999_us": 100.0}},
                ]},
                "activation": {"samples_ms": {"berth_first_instruction": [10.0, 12.0],
                    "lxc_execute_first_instruction": [20.0, 20.0], "runc_first_instruction": [30.0, 30.0]}},
            }
        })
    }

    #[test]
    fn counterparts_are_found_and_turned_into_performance_ratios() {
        let d = doc();
        // a time: host / guest
        let s = samples(&d, Ours::Metric("cpu", "sysbench cpu, 1 instance")).unwrap();
        assert!((s[1] - 1.0 / 1.02).abs() < 1e-12);
        let s = samples(&d, Ours::Metric("cpu", "stress-ng cpu bitops")).unwrap();
        let _ = s;
        let e = estimate(&d, Ours::Metric("cpu", "stress-ng cpu bitops")).ok();
        let (cell, v) = verdict(e, Ours::Metric("cpu", ""), None);
        assert!(cell.starts_with("0.900 ± "), "{cell}");
        assert_eq!(v, "container 10.0 % worse");
        assert_eq!(
            samples(&d, Ours::Net("Throughput", "shared", "iperf3 TCP", true)).unwrap(),
            vec![0.9, 0.92]
        );
        // a matrix time column: alone / with
        let m = samples(
            &d,
            Ours::Matrix("cpu", "sysbench cpu, 1 instance", "guest_with_host"),
        )
        .unwrap();
        assert_eq!(m, vec![0.5, 0.5]);
        // v1 over v2: one v2 run, so no CI; the ratio of the means
        let e = estimate(&d, Ours::Cgroups("p999_us", "max")).unwrap();
        assert!((e.mean - 1.2).abs() < 1e-12 && e.ci95.is_nan(), "{e:?}");
        let tight = Est {
            mean: 1.2,
            ci95: 0.01,
        };
        assert_eq!(
            verdict(Some(tight), Ours::Cgroups("", ""), None).1,
            "v1 20 % higher"
        );
        assert!(estimate(&d, Ours::Cgroups("instructions", "max"))
            .unwrap_err()
            .contains("not counted"));
        assert_eq!(
            samples(&d, Ours::Start("lxc-execute")).unwrap(),
            vec![0.5, 0.6]
        );
        let est = |v: &[f64]| {
            let s = summarize(v).unwrap();
            Some(Est {
                mean: s.mean,
                ci95: s.ci95,
            })
        };
        let fast = [0.5, 0.6, 0.55, 0.52, 0.58];
        let start = Ours::Start("lxc-execute");
        assert_eq!(verdict(est(&fast), start, Some(0.8)).1, "at or below 0.8 ✓");
        assert_eq!(
            verdict(est(&[0.5, 0.6]), start, Some(0.8)).1,
            "0.8 within the interval"
        );
        assert_eq!(
            verdict(est(&[0.9, 0.9]), Ours::Start("runc"), Some(0.5)).1,
            "above 0.5 ✗"
        );
        assert_eq!(
            samples(&d, Ours::Metric("fs", "dd")).unwrap_err(),
            "fs: fio is missing"
        );
        assert_eq!(
            samples(&d, Ours::Metric("mem", "STREAM")).unwrap_err(),
            "suite mem not in this run"
        );
        assert_eq!(verdict(None, Ours::None(""), None).1, "not measured");
    }

    #[test]
    fn the_report_mirrors_every_published_table() {
        let (md, panels) = render(&doc(), Some("paper.svg"));
        for t in TABLES {
            assert!(
                md.contains(&format!("### {} {}", t.id, t.title)),
                "{}",
                t.id
            );
            for r in t.rows {
                assert!(
                    md.contains(&format!("| {} | {} |", r.test, r.published)),
                    "{}",
                    r.test
                );
            }
        }
        assert!(md.contains("## D. MicroVMs vs containers"));
        assert!(md.contains("the microvm suite did not run"));
        assert!(md.contains("Test CPU (2 cores online)"));
        assert!(md.contains("![ratios beside the published ones](paper.svg)"));
        // A.1 has published ratios and this run's bars
        let a1 = panels.iter().find(|p| p.title.starts_with("A.1")).unwrap();
        assert!(a1.groups.iter().any(|g| g.bars.len() == 2));
        let svg = crate::chart::svg("paper", &panels);
        crate::chart::well_formed(&svg).unwrap();
    }

    #[test]
    fn later_runs_replace_suites() {
        let a = json!({"environment": {"date": "a"}, "suites": {"cpu": 1, "mem": 2}});
        let b = json!({"environment": {"date": "b"}, "suites": {"mem": 3, "net": 4}});
        let m = merge(vec![a, b]);
        assert_eq!(m["suites"], json!({"cpu": 1, "mem": 3, "net": 4}));
        assert_eq!(m["environment"]["date"], "b");
    }
}
