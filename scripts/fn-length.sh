#!/usr/bin/env bash
# No function in crates/*/src longer than 150 lines counted raw: from its `fn` line to its
# closing brace, comments and blank lines included (clippy's too_many_lines, at the same
# threshold in clippy.toml, counts code lines only). Test functions inside `#[cfg(test)]`
# modules count; the end-to-end tests of crates/*/tests/ do not, as for clippy.
#   bash scripts/fn-length.sh [MAX]
# Lists each function over MAX (150) as FILE:LINE NAME LINES and exits 1 if there is one.
# It relies on rustfmt's layout: a body ends at the first `}` line at its `fn` line's
# indentation.
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-150}

find crates/*/src -name '*.rs' -print0 | sort -z | xargs -0 awk -v max="$max" '
    FNR == 1 { delete start; delete name; delete open }
    {
        match($0, /^ */)
        ind = RLENGTH
        rest = substr($0, ind + 1)
    }
    # A function begins: its visibility and qualifiers, then `fn NAME`.
    rest ~ /^(pub(\([a-z:_ ]+\))? )?(default )?(const )?(async )?(unsafe )?(extern "[A-Za-z]+" )?fn [A-Za-z_][A-Za-z0-9_]*/ {
        n = rest
        sub(/^.*fn /, "", n)
        sub(/[^A-Za-z0-9_].*$/, "", n)
        start[ind] = FNR; name[ind] = n; open[ind] = 0
    }
    # Its signature ends: with `;` it has no body (a trait declaration), with `{` the body opens.
    (ind in start) && !open[ind] {
        if (rest ~ /;$/) { delete start[ind]; next }
        if (rest ~ /\{ *\}$/ && FNR == start[ind]) { delete start[ind]; next }
        if (rest ~ /\{$/) { open[ind] = 1; next }
    }
    (ind in start) && open[ind] && rest ~ /^}/ {
        len = FNR - start[ind] + 1
        if (len > max) {
            printf "%s:%d %s %d lines\n", FILENAME, start[ind], name[ind], len
            over++
        }
        delete start[ind]
    }
    END {
        if (over) {
            printf "%d function(s) over %d lines (counted raw): split them\n", over, max > "/dev/stderr"
            exit 1
        }
    }
'
