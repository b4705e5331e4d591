//! `berth`: one binary for the CLI, the daemon (`berth daemon`), the per-container shim
//! (`berth __shim`, started by the daemon) and the vendor tools (`key`, `pack`, `repo`).

mod cli;
mod client;
mod daemon;
mod fault;
mod fetch;
mod logger;
mod shim;
#[cfg(feature = "vendor")]
mod vendor;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("__shim") {
        logger::init("berth-shim");
        if let Err(e) = shim::ShimArgs::from_args(&args[1..]).and_then(shim::run) {
            eprintln!("berth-shim: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    std::process::exit(cli::main(args));
}
