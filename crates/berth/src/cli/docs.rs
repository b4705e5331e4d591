//! Shell completions (bash, zsh, fish) and the man page, written from the command table
//! ([`super::spec`]) so that they list exactly what `--help` does. Package names are
//! completed by asking the daemon (`berth --json list`), quietly: without a daemon they are
//! simply not offered.

use std::fmt::Write;

use crate::command::{self as spec, Cmd, Operand, Part, COMMANDS, GLOBAL};

/// Options that take a file or a directory name as their value.
const FILE_VALUES: &[&str] = &["--config", "--output", "-o", "--key", "-k"];

fn opt_words(c: &Cmd) -> Vec<&'static str> {
    let mut v = Vec::new();
    for o in c.options {
        v.push(o.long);
        if !o.short.is_empty() {
            v.push(o.short);
        }
    }
    v
}

fn value_options() -> Vec<&'static str> {
    let mut v: Vec<&str> = Vec::new();
    for o in GLOBAL.iter().chain(COMMANDS.iter().flat_map(|c| c.options)) {
        if !o.value.is_empty() {
            for w in [o.long, o.short] {
                if !w.is_empty() && !v.contains(&w) {
                    v.push(w);
                }
            }
        }
    }
    v
}

fn operand_kind(o: Operand) -> &'static str {
    match o {
        Operand::None | Operand::Any => "none",
        Operand::Package => "installed",
        Operand::Available => "available",
        Operand::Words(_) => "words",
        Operand::Dir => "dir",
    }
}

fn operand_words(o: Operand) -> String {
    match o {
        Operand::Words(w) => w.join(" "),
        _ => String::new(),
    }
}

pub fn bash() -> String {
    let mut s = String::new();
    let families = spec::families();
    let _ = writeln!(
        s,
        "# bash completion for berth, written by `berth completions bash`."
    );
    let _ = writeln!(s, "_berth_names() {{");
    let _ = writeln!(
        s,
        "    berth --json list \"--$1\" 2>/dev/null | sed -n 's/^ *\"name\": *\"\\([^\"]*\\)\".*/\\1/p'"
    );
    let _ = writeln!(s, "}}\n");
    let _ = writeln!(s, "_berth() {{");
    let _ = writeln!(
        s,
        "    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}"
    );
    let _ = writeln!(s, "    local i w cmd= sub= opts= operand= words=");
    let _ = writeln!(s, "    for ((i = 1; i < COMP_CWORD; i++)); do");
    let _ = writeln!(s, "        w=${{COMP_WORDS[i]}}");
    let _ = writeln!(s, "        case $w in");
    let _ = writeln!(s, "        --config) ((i++)) ;;");
    let _ = writeln!(s, "        -*) ;;");
    let _ = writeln!(
        s,
        "        *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;"
    );
    let _ = writeln!(s, "        esac");
    let _ = writeln!(s, "    done");
    let _ = writeln!(s, "    case $prev in");
    let _ = writeln!(s, "    {})", FILE_VALUES.join(" | "));
    let _ = writeln!(
        s,
        "        COMPREPLY=($(compgen -f -- \"$cur\")); return ;;"
    );
    let values: Vec<&str> = value_options()
        .into_iter()
        .filter(|o| !FILE_VALUES.contains(o))
        .collect();
    let _ = writeln!(s, "    {}) return ;;", values.join(" | "));
    let _ = writeln!(s, "    esac");
    let globals: Vec<&str> = GLOBAL
        .iter()
        .flat_map(|o| [o.long, o.short])
        .filter(|w| !w.is_empty())
        .collect();
    let _ = writeln!(s, "    if [[ -z $cmd ]]; then");
    let _ = writeln!(
        s,
        "        COMPREPLY=($(compgen -W \"{} {}\" -- \"$cur\")); return",
        spec::first_words().join(" "),
        globals.join(" ")
    );
    let _ = writeln!(s, "    fi");
    let _ = writeln!(s, "    local key=$cmd");
    let _ = writeln!(s, "    case $cmd in");
    for (family, subs) in &families {
        let _ = writeln!(s, "    {family})");
        let _ = writeln!(
            s,
            "        if [[ -z $sub ]]; then COMPREPLY=($(compgen -W \"{}\" -- \"$cur\")); return; fi",
            subs.join(" ")
        );
        let _ = writeln!(s, "        key=\"$cmd $sub\" ;;");
    }
    let _ = writeln!(s, "    esac");
    let _ = writeln!(s, "    case $key in");
    for c in COMMANDS {
        let _ = writeln!(
            s,
            "    \"{}\") opts=\"{}\" operand={} words=\"{}\" ;;",
            c.name,
            opt_words(c).join(" "),
            operand_kind(c.operand),
            operand_words(c.operand)
        );
    }
    let _ = writeln!(s, "    *) return ;;");
    let _ = writeln!(s, "    esac");
    let _ = writeln!(s, "    if [[ $cur == -* ]]; then");
    let _ = writeln!(
        s,
        "        COMPREPLY=($(compgen -W \"$opts --json --config\" -- \"$cur\")); return"
    );
    let _ = writeln!(s, "    fi");
    let _ = writeln!(s, "    case $operand in");
    let _ = writeln!(
        s,
        "    installed | available) COMPREPLY=($(compgen -W \"$(_berth_names \"$operand\")\" -- \"$cur\")) ;;"
    );
    let _ = writeln!(
        s,
        "    words) COMPREPLY=($(compgen -W \"$words\" -- \"$cur\")) ;;"
    );
    let _ = writeln!(s, "    dir) COMPREPLY=($(compgen -d -- \"$cur\")) ;;");
    let _ = writeln!(s, "    esac");
    let _ = writeln!(s, "}}");
    let _ = writeln!(s, "complete -F _berth berth");
    s
}

/// A string in single quotes for zsh and fish (a quote inside is closed, escaped, reopened).
fn sq(t: &str) -> String {
    format!("'{}'", t.replace('\'', "'\\''"))
}

/// The first sentence-part of a help text, short enough for a completion menu.
fn brief(help: &str) -> String {
    let cut = help
        .find(['(', ';', ':'])
        .map(|i| help[..i].trim_end())
        .unwrap_or(help);
    spec::wrap(cut, 70).into_iter().next().unwrap_or_default()
}

pub fn zsh() -> String {
    let mut s = String::new();
    let _ = writeln!(s, "#compdef berth");
    let _ = writeln!(
        s,
        "# zsh completion for berth, written by `berth completions zsh`."
    );
    let _ = writeln!(s, "_berth_names() {{");
    let _ = writeln!(s, "  local -a names");
    let _ = writeln!(
        s,
        "  names=(${{(f)\"$(berth --json list --$1 2>/dev/null | sed -n 's/^ *\"name\": *\"\\([^\"]*\\)\".*/\\1/p')\"}})"
    );
    let _ = writeln!(s, "  compadd -a names");
    let _ = writeln!(s, "}}\n");
    let _ = writeln!(s, "_berth() {{");
    let _ = writeln!(s, "  local -a cmds words_ opts");
    let _ = writeln!(s, "  local i w cmd= sub= key");
    let _ = writeln!(s, "  for (( i = 2; i < CURRENT; i++ )); do");
    let _ = writeln!(s, "    w=${{words[i]}}");
    let _ = writeln!(s, "    case $w in");
    let _ = writeln!(s, "      --config) (( i++ )) ;;");
    let _ = writeln!(s, "      -*) ;;");
    let _ = writeln!(
        s,
        "      *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;"
    );
    let _ = writeln!(s, "    esac");
    let _ = writeln!(s, "  done");
    let _ = writeln!(s, "  case ${{words[CURRENT-1]}} in");
    let _ = writeln!(s, "    {}) _files; return ;;", FILE_VALUES.join("|"));
    let values: Vec<&str> = value_options()
        .into_iter()
        .filter(|o| !FILE_VALUES.contains(o))
        .collect();
    let _ = writeln!(s, "    {}) return ;;", values.join("|"));
    let _ = writeln!(s, "  esac");
    let _ = writeln!(s, "  if [[ -z $cmd ]]; then");
    let _ = writeln!(s, "    if [[ $PREFIX == -* ]]; then");
    let globals: Vec<String> = GLOBAL
        .iter()
        .map(|o| sq(&format!("{}:{}", o.long, brief(o.help))))
        .collect();
    let _ = writeln!(s, "      opts=({})", globals.join(" "));
    let _ = writeln!(s, "      _describe option opts; return");
    let _ = writeln!(s, "    fi");
    let mut firsts = Vec::new();
    for w in spec::first_words() {
        let help = COMMANDS
            .iter()
            .find(|c| c.name == w)
            .map(|c| brief(c.help))
            .unwrap_or_else(|| {
                spec::families()
                    .into_iter()
                    .find(|(f, _)| *f == w)
                    .map(|(_, s)| s.join(", "))
                    .unwrap_or_default()
            });
        firsts.push(sq(&format!("{w}:{help}")));
    }
    let _ = writeln!(s, "    cmds=({})", firsts.join(" "));
    let _ = writeln!(s, "    _describe command cmds; return");
    let _ = writeln!(s, "  fi");
    let _ = writeln!(s, "  key=$cmd");
    let _ = writeln!(s, "  case $cmd in");
    for (family, subs) in spec::families() {
        let described: Vec<String> = subs
            .iter()
            .map(|sub| {
                let c = COMMANDS
                    .iter()
                    .find(|c| c.name == format!("{family} {sub}"));
                sq(&format!(
                    "{sub}:{}",
                    c.map(|c| brief(c.help)).unwrap_or_default()
                ))
            })
            .collect();
        let _ = writeln!(s, "    {family})");
        let _ = writeln!(
            s,
            "      if [[ -z $sub ]]; then cmds=({}); _describe subcommand cmds; return; fi",
            described.join(" ")
        );
        let _ = writeln!(s, "      key=\"$cmd $sub\" ;;");
    }
    let _ = writeln!(s, "  esac");
    let _ = writeln!(s, "  case $key in");
    for c in COMMANDS {
        let mut opts: Vec<String> = Vec::new();
        for o in c.options {
            for w in [o.long, o.short] {
                if !w.is_empty() {
                    opts.push(sq(&format!("{w}:{}", brief(o.help))));
                }
            }
        }
        let operand = match c.operand {
            Operand::Package => "_berth_names installed".to_string(),
            Operand::Available => "_berth_names available".to_string(),
            Operand::Words(w) => format!("compadd {}", w.join(" ")),
            Operand::Dir => "_files -/".to_string(),
            Operand::None | Operand::Any => ":".to_string(),
        };
        let _ = writeln!(
            s,
            "    {})\n      if [[ $PREFIX == -* ]]; then opts=({}); _describe option opts; else {operand}; fi ;;",
            sq(c.name),
            opts.join(" ")
        );
    }
    let _ = writeln!(s, "  esac");
    let _ = writeln!(s, "}}\n");
    let _ = writeln!(s, "_berth \"$@\"");
    s
}

pub fn fish() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# fish completion for berth, written by `berth completions fish`."
    );
    let _ = writeln!(s, "function __berth_names");
    let _ = writeln!(s, "    command -q berth; or return");
    let _ = writeln!(
        s,
        "    berth --json list --$argv[1] 2>/dev/null | string replace -rf '^ *\"name\": *\"([^\"]*)\".*' '$1'"
    );
    let _ = writeln!(s, "end\n");
    let _ = writeln!(s, "complete -c berth -f");
    for o in GLOBAL {
        let _ = writeln!(
            s,
            "complete -c berth {} -d {}",
            fish_opt(o),
            sq(&brief(o.help))
        );
    }
    let firsts = spec::first_words();
    let none_yet = format!("not __fish_seen_subcommand_from {}", firsts.join(" "));
    for w in &firsts {
        let help = COMMANDS
            .iter()
            .find(|c| c.name == *w)
            .map(|c| brief(c.help))
            .unwrap_or_else(|| w.to_string());
        let _ = writeln!(
            s,
            "complete -c berth -n {} -a {w} -d {}",
            sq(&none_yet),
            sq(&help)
        );
    }
    for (family, subs) in spec::families() {
        for sub in &subs {
            let c = COMMANDS
                .iter()
                .find(|c| c.name == format!("{family} {sub}"));
            let cond = format!(
                "__fish_seen_subcommand_from {family}; and not __fish_seen_subcommand_from {}",
                subs.join(" ")
            );
            let _ = writeln!(
                s,
                "complete -c berth -n {} -a {sub} -d {}",
                sq(&cond),
                sq(&c.map(|c| brief(c.help)).unwrap_or_default())
            );
        }
    }
    for c in COMMANDS {
        let cond = match c.name.split_once(' ') {
            Some((f, sub)) => {
                format!("__fish_seen_subcommand_from {f}; and __fish_seen_subcommand_from {sub}")
            }
            None => format!("__fish_seen_subcommand_from {}", c.name),
        };
        for o in c.options {
            let _ = writeln!(
                s,
                "complete -c berth -n {} {} -d {}",
                sq(&cond),
                fish_opt(o),
                sq(&brief(o.help))
            );
        }
        let operand = match c.operand {
            Operand::Package => Some("(__berth_names installed)".to_string()),
            Operand::Available => Some("(__berth_names available)".to_string()),
            Operand::Words(w) => Some(w.join(" ")),
            Operand::Dir => Some("(__fish_complete_path)".to_string()),
            Operand::None | Operand::Any => None,
        };
        if let Some(a) = operand {
            let _ = writeln!(s, "complete -c berth -n {} -a {}", sq(&cond), sq(&a));
        }
    }
    s
}

fn fish_opt(o: &spec::Opt) -> String {
    let mut s = String::new();
    if let Some(l) = o.long.strip_prefix("--") {
        let _ = write!(s, "-l {l}");
    } else if let Some(x) = o.long.strip_prefix('-') {
        let _ = write!(s, "-s {x}");
    }
    if let Some(x) = o.short.strip_prefix('-') {
        let _ = write!(s, " -s {x}");
    }
    if !o.value.is_empty() {
        s.push_str(if FILE_VALUES.contains(&o.long) {
            " -r -F"
        } else {
            " -x"
        });
    }
    s
}

/// Text for roff: backslashes and hyphens escaped, a leading dot or quote made literal.
fn roff(t: &str) -> String {
    let e = t.replace('\\', "\\e").replace('-', "\\-");
    if e.starts_with('.') || e.starts_with('\'') {
        format!("\\&{e}")
    } else {
        e
    }
}

fn roff_opt(o: &spec::Opt) -> String {
    let mut s = format!("\\fB{}\\fR", roff(o.long));
    if !o.short.is_empty() {
        s = format!("\\fB{}\\fR, {s}", roff(o.short));
    }
    if !o.value.is_empty() {
        let _ = write!(s, " \\fI{}\\fR", roff(o.value));
    }
    s
}

pub fn manpage() -> String {
    let mut s = String::new();
    let v = env!("CARGO_PKG_VERSION");
    let _ = writeln!(s, ".TH BERTH 1 \"\" \"berth {v}\" \"User Commands\"");
    let _ = writeln!(s, ".SH NAME");
    let _ = writeln!(
        s,
        "berth \\- run third\\-party packages in LXC containers on small devices"
    );
    let _ = writeln!(s, ".SH SYNOPSIS");
    let _ = writeln!(
        s,
        ".B berth\n[\\fB\\-\\-config\\fR \\fIFILE\\fR] [\\fB\\-\\-json\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]"
    );
    let _ = writeln!(s, ".SH DESCRIPTION");
    let _ = writeln!(
        s,
        "berth runs third\\-party software packages on an embedded Linux device, each in its own LXC container (user namespaces, seccomp, cgroup quotas), from one signed repository. One binary is the command\\-line tool, the supervisor daemon (\\fBberth daemon\\fR) and, in builds with the vendor tools, the tools that build and sign packages.\n.PP\nThe device commands talk to the daemon over its admin socket, which answers root only. Options may come anywhere on the line; \\fB\\-\\-\\fR ends them (\\fBschedule add\\fR)."
    );
    let _ = writeln!(s, ".SH OPTIONS");
    for o in GLOBAL {
        let _ = writeln!(s, ".TP\n{}\n{}", roff_opt(o), roff(o.help));
    }
    for (part, title) in [
        (Part::Device, "DEVICE COMMANDS"),
        (Part::Vendor, "VENDOR COMMANDS"),
    ] {
        let _ = writeln!(s, ".SH {title}");
        if part == Part::Vendor {
            let _ = writeln!(
                s,
                "Not in the device build (\\fBcargo build \\-\\-no\\-default\\-features\\fR), which refuses them."
            );
        }
        for c in COMMANDS.iter().filter(|c| c.part == part) {
            let synopsis = if c.synopsis.is_empty() {
                String::new()
            } else {
                format!(" {}", roff(c.synopsis))
            };
            let _ = writeln!(
                s,
                ".TP\n\\fB{}\\fR{synopsis}\n{}",
                roff(c.name),
                roff(c.help)
            );
            if !c.options.is_empty() {
                let _ = writeln!(s, ".RS");
                for o in c.options {
                    let _ = writeln!(s, ".TP\n{}\n{}", roff_opt(o), roff(o.help));
                }
                let _ = writeln!(s, ".RE");
            }
        }
    }
    let _ = writeln!(s, ".SH EXIT STATUS");
    let _ = writeln!(
        s,
        "0 success; 1 an error (with \\fB\\-\\-json\\fR, an object with \\fBerror\\fR, \\fBcode\\fR and \\fBstatus\\fR on standard output); 2 a command line berth cannot read; 3 the daemon is not running."
    );
    let _ = writeln!(s, ".SH ENVIRONMENT");
    let _ = writeln!(
        s,
        ".TP\n\\fBBERTH_CONFIG\\fR\nthe configuration file when \\fB\\-\\-config\\fR is not given."
    );
    let _ = writeln!(s, ".SH FILES");
    for (f, what) in [
        (
            "/etc/berth/berth.toml",
            "the device's configuration and policy",
        ),
        (
            "/etc/berth/keys/",
            "the public keys a repository index must be signed with",
        ),
        (
            "/var/lib/berth/",
            "state: installed packages, the store of images, containers' /data, crash reports",
        ),
        (
            "/run/berth/",
            "run time: the admin socket, image mounts, LXC's container directories",
        ),
    ] {
        let _ = writeln!(s, ".TP\n{}\n{}", roff(f), roff(what));
    }
    let _ = writeln!(s, ".SH SEE ALSO");
    let _ = writeln!(s, ".BR lxc (7),\n.BR signify (1),\n.BR mksquashfs (1)");
    s
}

pub fn completions(shell: &str) -> Result<String, super::args::Usage> {
    match shell {
        "bash" => Ok(bash()),
        "zsh" => Ok(zsh()),
        "fish" => Ok(fish()),
        _ => Err(super::args::Usage(format!(
            "completions: {shell:?} is not a shell berth knows; bash, zsh or fish"
        ))),
    }
}
