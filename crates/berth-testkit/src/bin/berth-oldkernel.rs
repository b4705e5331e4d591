//! `berth-oldkernel [--keep-psi] [--] CMD [ARG…]`: runs CMD as on an old kernel
//! (docs/kernels.md): the syscalls newer than Linux 4.14 answer ENOSYS and `/proc/pressure`
//! holds no PSI file, for CMD and everything it starts. `close_range` is left alone unless
//! `BERTH_OLDKERNEL_SYSCALLS` says otherwise (`berth_sys::oldkernel::chosen`).
//! `scripts/oldkernel.sh` builds and calls it. Root (a mount namespace; as root the filter
//! needs no no_new_privs).

use std::os::unix::process::CommandExt;
use std::process::Command;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut hide_psi = true;
    while let Some(a) = args.first() {
        match a.as_str() {
            "--keep-psi" => hide_psi = false,
            "--" => {
                args.remove(0);
                break;
            }
            _ => break,
        }
        args.remove(0);
    }
    if args.is_empty() {
        eprintln!("usage: berth-oldkernel [--keep-psi] [--] CMD [ARG...]");
        std::process::exit(2);
    }
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..]);
    berth_sys::oldkernel::command(&mut cmd, hide_psi);
    let e = cmd.exec();
    eprintln!("berth-oldkernel: {}: {e}", args[0]);
    std::process::exit(127);
}
