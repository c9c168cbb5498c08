# Sourced by .ci/run and .ci/trixie-root: the Debian mirror this machine's apt already uses, so
# no registry's host name is written in the repository. Prints the URI of the first source that
# carries Debian's main archive (deb822 `URIs:` in sources.list.d, or a one-line `deb` entry).
debian_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r $f ]] || continue
        uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' "$f")
        [[ -n $uri ]] && { echo "${uri%/}"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r $f ]] || continue
        uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' "$f")
        [[ -n $uri ]] && { echo "${uri%/}"; return 0; }
    done
    echo "error: no Debian mirror in this machine's apt sources" >&2
    return 1
}
