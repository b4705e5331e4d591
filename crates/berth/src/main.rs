//! `berth`: one binary for the CLI, the daemon (`berth daemon`), the per-container shim
//! (`berth __shim`, started by the daemon), its health probes and scheduled jobs (`berth __health`) and the vendor tools (`key`, `pack`, `repo`).
#![forbid(unsafe_code)]

/// `eprintln!` that cannot panic: a standard error that has gone (`2>&1 | grep -q`) or is
/// full loses the line, never the command's exit status (and std's panicking `eprintln!` is
/// left out of the binary).
macro_rules! warnln {
    ($($t:tt)*) => { $crate::logger::warn_line(format_args!("{}\n", format_args!($($t)*))) };
}

mod cli;
mod client;
mod command;
mod daemon;
mod fetch;
mod health;
mod hooks;
mod logger;
mod shim;
#[cfg(feature = "vendor")]
mod vendor;

fn main() {
    // Names, options and the paths berth is given are UTF-8 (they go into JSON requests,
    // TOML and LXC configurations); anything else is refused by position, never a panic.
    let mut args: Vec<String> = Vec::new();
    for (i, a) in std::env::args_os().skip(1).enumerate() {
        match a.into_string() {
            Ok(s) => args.push(s),
            Err(bad) => {
                warnln!(
                    "berth: argument {} ({bad:?}) is not valid UTF-8: names, options and paths must be\n(berth --help lists the commands)",
                    i + 1
                );
                std::process::exit(2);
            }
        }
    }
    if args.first().map(String::as_str) == Some("__shim") {
        logger::init("berth-shim");
        if let Err(e) = shim::ShimArgs::from_args(&args[1..]).and_then(shim::run) {
            warnln!("berth-shim: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    if args.first().map(String::as_str) == Some("__health") {
        // Into the container's budget first: the probe's or the job's work (its attach,
        // the job's output relayed) is the container's.
        if let Err(e) = shim::enter_cgroups() {
            warnln!("berth-health: {e}");
            std::process::exit(2);
        }
        match health::HealthArgs::from_args(&args[1..]) {
            Ok(a) => std::process::exit(health::run(a)),
            Err(e) => {
                warnln!("berth-health: {e:#}");
                std::process::exit(2);
            }
        }
    }
    std::process::exit(cli::main(args));
}
